//! Reading an internally tagged object (`{ "kind": "pause", … }`, `{ "pattern": "burst", … }`)
//! into a typed enum whose variants carry exactly their own fields, with every error at its
//! field. The tag first, as hand-written files write it: the rest streams into the variant's
//! own type, so each error keeps serde's exact position. The tag elsewhere: the object is
//! read whole first. A missing field is named in terms of the variant ("a pause fault needs
//! `gateway`"), since serde points such an error at the object as a whole. Faults and
//! arrival patterns read through it.

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// An enum read from an object tagged by one field.
pub(crate) trait Tagged: Sized {
    /// The tag's values.
    type Tag: for<'a> Deserialize<'a> + Copy;
    /// The tag's field.
    const TAG: &'static str;
    /// What serde says it expected.
    const EXPECTING: &'static str;
    /// The variant `tag` names, its fields read from `fields`.
    fn of_tag<'de, D: Deserializer<'de>>(tag: Self::Tag, fields: D) -> Result<Self, D::Error>;
    /// A missing `field`, in terms of the variant.
    fn needs(tag: Self::Tag, field: &str) -> String;
}

/// Names the variant in serde's message for a missing field; other messages, an unknown
/// field's among them, keep serde's exact position.
fn in_terms_of<T: Tagged>(tag: T::Tag, message: String) -> String {
    match message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        Some(field) => T::needs(tag, field),
        None => message,
    }
}

/// Reads a `T` from `d` (see the module docs).
pub(crate) fn deserialize<'de, T: Tagged, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    struct V<T>(PhantomData<T>);
    impl<'de, T: Tagged> Visitor<'de> for V<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(T::EXPECTING)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            let Some(first) = map.next_key::<String>()? else {
                return Err(de::Error::missing_field(T::TAG));
            };
            if first == T::TAG {
                let tag: T::Tag = map.next_value()?;
                return T::of_tag(tag, MapAccessDeserializer::new(map)).map_err(|e| {
                    let message = e.to_string();
                    let ours = in_terms_of::<T>(tag, message.clone());
                    if ours == message {
                        e
                    } else {
                        de::Error::custom(ours)
                    }
                });
            }
            let mut fields = serde_json::Map::new();
            fields.insert(first, map.next_value()?);
            while let Some(k) = map.next_key::<String>()? {
                let v: serde_json::Value = map.next_value()?;
                if fields.contains_key(&k) {
                    return Err(de::Error::custom(format!("duplicate field `{k}`")));
                }
                fields.insert(k, v);
            }
            let Some(tag) = fields.remove(T::TAG) else {
                return Err(de::Error::missing_field(T::TAG));
            };
            let tag = T::Tag::deserialize(tag).map_err(de::Error::custom)?;
            T::of_tag(tag, serde_json::Value::Object(fields))
                .map_err(|e| de::Error::custom(in_terms_of::<T>(tag, e.to_string())))
        }
    }
    d.deserialize_map(V(PhantomData))
}
