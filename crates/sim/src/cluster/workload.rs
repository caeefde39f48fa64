//! The clients: arrival patterns, the choice of key and gateway, and clients that pace
//! themselves from the answers' headers.

use super::nodes::Cluster;
use super::record::{client_ip, to_history};
use super::script::Script;
use crate::rng::{SimRng, stream};
use crate::scenario::{ArrivalSpec, ClientSpec, GatewayChoice, Pattern};
use ratelab_core::Nanos;
use ratelab_gateway::limits::NoHeaders;
use ratelab_gateway::{Answer as GatewayAnswer, Request as GatewayRequest};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// Reads `name`'s `r` and `t` from a RateLimit field value (`"per-key";r=0;t=1, …`): the
/// value parsed as a structured-field List (RFC 9651), the first item whose string or token
/// is `name`, its `r` and `t` as non-negative integers. `None` if the value is not a List,
/// no item has that name, or either parameter is missing or not such an integer.
pub(crate) fn ratelimit_item(value: &str, name: &str) -> Option<(u64, u64)> {
    let list: sfv::List = sfv::Parser::new(value).parse().ok()?;
    let item = list.iter().find_map(|entry| match entry {
        sfv::ListEntry::Item(item) => {
            let bare = &item.bare_item;
            let named = bare.as_string().map(|s| s.as_str()) == Some(name)
                || bare.as_token().map(|t| t.as_str()) == Some(name);
            named.then_some(item)
        }
        sfv::ListEntry::InnerList(_) => None,
    })?;
    let param = |k: &str| u64::try_from(i64::from(item.params.get(k)?.as_integer()?)).ok();
    Some((param("r")?, param("t")?))
}

/// `PREFIX:N`, the `n`th of a client's keys, made in one allocation without a formatter.
pub(crate) fn key_name(prefix: &str, n: u64) -> String {
    let mut buf = [0; 20];
    let digits = ratelab_core::headers::decimal(&mut buf, n);
    let mut key = String::with_capacity(prefix.len() + 1 + digits.len());
    key.push_str(prefix);
    key.push(':');
    // ASCII digits: always UTF-8.
    key.push_str(std::str::from_utf8(digits).unwrap_or_default());
    key
}

/// One gateway request: run the gateway pipeline, record and return the answer.
pub(crate) async fn serve<S: Script>(
    cluster: Arc<Cluster<S>>,
    g: usize,
    id: u64,
    peer: IpAddr,
    key: String,
    cost: u64,
) -> GatewayAnswer {
    let gw = &cluster.gateways[g];
    let req = GatewayRequest {
        peer,
        api_key: Some(key.as_bytes()),
        route: "/",
        method: "GET",
        headers: &NoHeaders,
        cost,
        trace: id,
    };
    let guard = cluster
        .guard
        .as_ref()
        .map(|g| g as &dyn ratelab_gateway::Guard);
    // Boxed: the pipeline's future is kilobytes, and a spawned task would copy it.
    let answer = Box::pin(gw.gateway.check(req, guard)).await;
    let (recorded, layers) = to_history(&answer);
    cluster
        .shared
        .record(|h, at| h.answer(at, id, recorded, layers));
    answer
}

/// A client's arrival times, in ns from the start of the run.
pub(crate) struct Arrivals {
    pub(crate) pattern: Pattern,
    pub(crate) start: u64,
    pub(crate) stop: u64,
    pub(crate) k: u64,
    pub(crate) phase: u64,
    pub(crate) rate: u64,
    pub(crate) next_poisson: u64,
    pub(crate) burst: Vec<u64>,
}

impl Arrivals {
    pub(crate) fn new(c: &ClientSpec, duration_ms: u64, rng: &mut SimRng) -> Arrivals {
        let a = &c.arrival;
        let start = c.start_ms.get() * 1_000_000;
        let stop = c.stop_ms.map_or(duration_ms, |v| v.get()) * 1_000_000;
        // Every pattern draws a phase and a first Poisson gap, as at a rate of 1 when it has
        // none: each client's stream of draws is the same whatever its pattern.
        let rate = a.rate_per_sec().unwrap_or(1);
        let interval = 1_000_000_000 / rate;
        let mut burst = Vec::new();
        match a {
            ArrivalSpec::Burst(b) => {
                let n = b.requests.get();
                let at = b.at_ms.get() * 1_000_000;
                let spread = b.spread_ms.map_or(0, |v| v.get()) * 1_000_000;
                burst.extend((0..n).map(|k| at + spread * k / n));
            }
            ArrivalSpec::BoundaryBursts(bb) => {
                let n = bb.requests.get();
                let every = bb.every_ms.get() * 1_000_000;
                let before = bb.before_ms.get() * 1_000_000;
                let after = bb.after_ms.get() * 1_000_000;
                let mut b = (start / every + 1) * every;
                while b < stop {
                    burst.extend((0..n).map(|k| b - before + before * k / n));
                    burst.extend((0..n).map(|k| b + after * k / n));
                    b += every;
                }
                burst.retain(|&t| t >= start && t < stop);
            }
            ArrivalSpec::Times(t) => {
                burst.extend(t.times_us.iter().map(|&us| us.saturating_mul(1_000)));
                burst.sort_unstable();
            }
            ArrivalSpec::Constant(_) | ArrivalSpec::Poisson(_) => {}
        }
        burst.reverse();
        let phase = rng.below(interval.max(1));
        let next_poisson = start + rng.exponential(interval as f64);
        Arrivals {
            pattern: a.pattern(),
            start,
            stop,
            k: 0,
            phase,
            rate,
            next_poisson,
            burst,
        }
    }

    pub(crate) fn next(&mut self, rng: &mut SimRng) -> Option<u64> {
        let t = match self.pattern {
            Pattern::Constant => {
                let t = self.start
                    + self.phase
                    + (u128::from(self.k) * 1_000_000_000 / u128::from(self.rate)) as u64;
                self.k += 1;
                t
            }
            Pattern::Poisson => {
                let t = self.next_poisson;
                self.next_poisson += rng.exponential(1e9 / self.rate as f64);
                t
            }
            Pattern::Burst | Pattern::BoundaryBursts | Pattern::Times => self.burst.pop()?,
        };
        (t < self.stop).then_some(t)
    }
}

/// Sends one client's requests.
pub(crate) async fn client_main<S: Script>(
    cluster: Arc<Cluster<S>>,
    group: usize,
    client: u32,
    seed: u64,
) {
    let spec = &cluster.sc.spec;
    let c = &spec.clients[group];
    let mut rng = SimRng::new(seed, stream::CLIENTS + u64::from(client));
    let mut arrivals = Arrivals::new(c, spec.duration_ms.get(), &mut rng);
    let n = cluster.gateways.len() as u64;
    let mut next_gateway = u64::from(client) % n;
    let mut not_before = 0u64;
    let peer = client_ip(c.address, group as u32, client);
    // A denied request to send again, and when (`retry_at_retry_after`).
    let mut retry: Option<(u64, String)> = None;
    // The time, read again after every await (madsim's clock only moves between polls).
    let mut now = cluster.shared.now();
    loop {
        let (t, again) = match retry.take() {
            Some((t, key)) => (t, Some(key)),
            None => match arrivals.next(&mut rng) {
                Some(t) => (t, None),
                None => break,
            },
        };
        if t < not_before {
            continue;
        }
        // A sleep takes at least `dilation::SLEEP_FLOOR`: sleep only when the arrival is
        // still ahead, so a late client catches up instead of drifting.
        if Nanos(t) > now {
            cluster.shared.sleep_until(Duration::from_nanos(t)).await;
            now = cluster.shared.now();
        }
        // A client that waited for answers can fall behind its arrivals: it still stops
        // sending at its stop time, so every request is sent while the run is on.
        if now.as_u64() >= arrivals.stop {
            break;
        }
        let key = match (again, &c.key, &c.keys) {
            (Some(k), _, _) => k,
            (None, Some(k), _) => k.clone(),
            (None, None, Some(ks)) => key_name(&ks.prefix, rng.below(ks.count.get())),
            (None, None, None) => unreachable!("validated: key or keys"),
        };
        let g = match c.gateway {
            GatewayChoice::RoundRobin => {
                let g = next_gateway;
                next_gateway = (next_gateway + 1) % n;
                g
            }
            GatewayChoice::Random => rng.below(n),
            GatewayChoice::Fixed(g) => u64::from(g),
        } as usize;
        let cost = c.cost.get();
        let mut id = 0;
        cluster.shared.record_at(now, |h, at| {
            id = h.send(at, client, group as u32, key.clone(), peer, g as u32, cost);
        });
        // The key goes with the request, copied only for a client that may send it again.
        let resend = c.waits_for_answers() && c.retry_at_retry_after;
        let (key, kept) = if resend {
            (key.clone(), Some(key))
        } else {
            (key, None)
        };
        let answer = cluster.gateways[g]
            .node
            .spawn(serve(cluster.clone(), g, id, peer, key, cost));
        crate::tasks::spawned(id);
        if !c.waits_for_answers() {
            continue;
        }
        let answer = answer.await;
        now = cluster.shared.now();
        let Ok(answer) = answer else { continue };
        let at = now.as_u64();
        let header = |name: &str| {
            answer
                .headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        };
        if answer.status == 429
            && let Some(secs) = header("retry-after").and_then(|v| v.parse::<u64>().ok())
        {
            not_before = at + secs * 1_000_000_000;
            if let Some(key) = kept.filter(|_| secs > 0) {
                retry = Some((not_before, key));
            }
        }
        if c.self_throttle
            && let Some((0, t)) = header("ratelimit").and_then(|v| ratelimit_item(v, "per-key"))
        {
            not_before = not_before.max(at + t * 1_000_000_000);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ratelimit_item;

    #[test]
    fn a_key_name_is_the_prefix_a_colon_and_the_number() {
        for (prefix, n) in [("user", 0), ("user", 999), ("k", u64::MAX), ("", 10)] {
            assert_eq!(super::key_name(prefix, n), format!("{prefix}:{n}"));
        }
    }

    #[test]
    fn the_named_items_remaining_and_reset_are_read() {
        let v = r#""per-ip";r=90;t=1, "per-key";r=0;t=2"#;
        assert_eq!(ratelimit_item(v, "per-key"), Some((0, 2)));
        assert_eq!(ratelimit_item(v, "per-ip"), Some((90, 1)));
        assert_eq!(ratelimit_item("per-key;t=3;r=1", "per-key"), Some((1, 3)));
        assert_eq!(ratelimit_item(v, "per-k"), None);
    }

    #[test]
    fn a_malformed_value_or_parameter_reads_as_absent() {
        for v in [
            r#""per-key";r=0"#,
            r#""per-key";r=-1;t=2"#,
            r#""per-key";r=0.5;t=2"#,
            r#""per-key";r=0;t=2,,"#,
            "",
        ] {
            assert_eq!(ratelimit_item(v, "per-key"), None, "{v}");
        }
    }
}
