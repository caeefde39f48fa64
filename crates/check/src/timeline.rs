//! A picture of a run: a self-contained HTML page with one SVG timeline of one key, as
//! Jepsen's timeline and Porcupine's visualiser draw a history.
//!
//! - one row per gateway: each request on the key as a bar from send to answer, coloured by
//!   its answer (admitted, denied, failed open, error, never answered), with a tick at each
//!   point the store applied one of its calls (from the run's events when they were kept,
//!   crossed when the reply was lost; else at the store time its decision rests on), and the
//!   request a checker named outlined;
//! - below, what the key admitted so far (a step line, by store time) against the envelope
//!   B + R·(t − t₀) from the first admission (for a window policy, the explorer's bound
//!   2L + L·(t − t₀)/W);
//! - fault windows shaded across the whole picture, and the violating window (the envelope's
//!   witness) highlighted.
//!
//! Every request's bar carries a tooltip with its id, times and answer. No script, no external
//! resource: the file opens anywhere.
//!
//! The page is drawn from a [`History`] and a [`Frame`] (what surrounds it: the rows, the
//! faults, the bound), so a simulated run and a probe of a real limiter draw the same way;
//! each builds its own frame.

use crate::Envelope;
use crate::history::{Answer, Event, History, Layer, RequestRecord, StoreFate};
use ratelab_core::{Algorithm, Nanos, Policy};
use std::fmt::Write as _;

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 110.0;
const RIGHT: f64 = 20.0;
const ROW: f64 = 34.0;
const CHART: f64 = 220.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ms(n: Nanos) -> f64 {
    n.as_u64() as f64 / 1e6
}

/// The colour and label of an answer.
fn paint(answer: Option<&Answer>) -> (&'static str, &'static str) {
    match answer {
        Some(Answer::Allowed { .. }) => ("#2e7d32", "admitted"),
        Some(Answer::Denied { .. }) | Some(Answer::Full) | Some(Answer::Cached { .. }) => {
            ("#c62828", "denied")
        }
        Some(Answer::FailedOpen(_)) | Some(Answer::Bypassed) => ("#ef6c00", "let through"),
        Some(Answer::Rejected) => ("#6a1b9a", "rejected"),
        Some(Answer::Error(_)) => ("#616161", "error"),
        None => ("#9e9e9e", "never answered"),
    }
}

fn decided_at(r: &RequestRecord) -> Option<Nanos> {
    match r.layers.per_key? {
        Answer::Allowed { decided_at, .. } | Answer::Denied { decided_at, .. } => Some(decided_at),
        _ => None,
    }
}

/// The bound a picture draws from the first admission: a token bucket's B + R·t; for a
/// window policy the explorer's window bound, 2L + L·t/W (any window placement).
pub fn bound_of(policy: &Policy) -> Envelope {
    match policy {
        Policy::TokenBucket(b) => Envelope::of_bucket(b),
        other => {
            let q = other.quota();
            Envelope {
                burst: q.limit.saturating_mul(2),
                amount: q.limit,
                period: q.window.as_u64().max(1),
            }
        }
    }
}

/// The bound's value `t` ms after the first admission.
fn envelope_at(env: &Envelope, t_ms: f64) -> f64 {
    env.burst as f64 + env.amount as f64 * t_ms * 1e6 / env.period.max(1) as f64
}

/// What a picture shows besides the requests: its title and caption, its rows, its time
/// span, the faults, the violating window and the bound.
#[derive(Clone, Debug)]
pub struct Frame {
    /// The page's title.
    pub title: String,
    /// A caption under it.
    pub description: String,
    /// What each row is (`gateway`, `client`): a request's row is its `gateway` field.
    pub row_label: &'static str,
    /// How many rows.
    pub rows: usize,
    /// The least span drawn, ms.
    pub duration_ms: f64,
    /// Fault windows, ms, with a label.
    pub faults: Vec<(f64, f64, &'static str)>,
    /// The violating window on this key, ms: from, to, admitted, bound.
    pub violation: Option<(f64, f64, u64, u64)>,
    /// The bound drawn against what was admitted.
    pub bound: Envelope,
}

/// What a checker's witness names: its key and request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Named {
    /// The key (`key "…"`, as Rust's `{:?}` quotes it).
    pub key: Option<String>,
    /// The request (`…: request N: …`).
    pub request: Option<u64>,
}

/// What the witness `detail` names.
pub fn named(detail: &str) -> Named {
    Named {
        key: named_key(detail),
        request: named_request(detail),
    }
}

/// The key a checker's witness names (`key "…"`, as Rust's `{:?}` quotes it).
pub fn named_key(detail: &str) -> Option<String> {
    let rest = detail.split_once("key \"")?.1;
    let mut key = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(key),
            '\\' => key.push(chars.next()?),
            c => key.push(c),
        }
    }
    None
}

/// The request id a checker's witness names (`…: request N: …`, after its key), to outline.
pub fn named_request(detail: &str) -> Option<u64> {
    let rest = detail.rsplit_once(": request ")?.1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The page for `key`'s requests of `h` in `frame`, outlining request `mark`.
pub fn draw(frame: &Frame, h: &History, key: &str, mark: Option<u64>) -> String {
    let reqs: Vec<&RequestRecord> = h.requests.iter().filter(|r| r.key == key).collect();
    let gateways = frame.rows.max(1);
    let end = reqs
        .iter()
        .map(|r| r.answer.map_or(r.sent_at, |(t, _)| t))
        .max()
        .map_or(frame.duration_ms, ms)
        .max(frame.duration_ms);
    let x = |t: f64| LEFT + (t / end.max(1e-9)) * (WIDTH - LEFT - RIGHT);
    let rows_h = ROW * gateways as f64;
    let chart_top = 40.0 + rows_h + 30.0;
    let height = chart_top + CHART + 50.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    // Faults, shaded across everything.
    for &(from, until, name) in &frame.faults {
        let _ = write!(
            svg,
            r##"<rect class="fault" x="{:.1}" y="20" width="{:.1}" height="{:.1}" fill="#ffe082" opacity="0.45"><title>{} {from} ms to {until} ms</title></rect><text x="{:.1}" y="16" fill="#8d6e00">{}</text>"##,
            x(from),
            (x(until) - x(from)).max(1.0),
            height - 40.0,
            escape(name),
            x(from) + 2.0,
            escape(name)
        );
    }
    // The violating window.
    if let Some((from, to, admitted, bound)) = frame.violation {
        let _ = write!(
            svg,
            r##"<rect class="violation" x="{:.1}" y="20" width="{:.1}" height="{:.1}" fill="none" stroke="#d50000" stroke-width="2" stroke-dasharray="6 3"><title>{admitted} admitted in [{from:.3} ms, {to:.3} ms] against a bound of {bound}</title></rect>"##,
            x(from),
            (x(to) - x(from)).max(2.0),
            height - 40.0,
        );
    }
    // One row per gateway (or client).
    for g in 0..gateways {
        let y = 40.0 + ROW * g as f64;
        let _ = write!(
            svg,
            r##"<text x="8" y="{:.1}">{} {g}</text><line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#e0e0e0"/>"##,
            y + ROW / 2.0 + 4.0,
            frame.row_label,
            WIDTH - RIGHT,
            y + ROW / 2.0,
            y + ROW / 2.0
        );
    }
    // Each request's bar height: its gateway's row, staggered by its place among the key's
    // requests so overlapping bars stay apart.
    let rows: std::collections::BTreeMap<u64, f64> = reqs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let y = 40.0 + ROW * f64::from(r.gateway) + 4.0 + (i % 4) as f64 * 6.0;
            (r.id, y)
        })
        .collect();
    for r in &reqs {
        let y = rows[&r.id];
        let answer = r.answer.as_ref().map(|(_, a)| a);
        let (colour, label) = paint(answer);
        let sent = ms(r.sent_at);
        let done = r.answer.map_or(end, |(t, _)| ms(t));
        let dash = if r.answer.is_none() {
            r#" stroke-dasharray="4 2""#
        } else {
            ""
        };
        let _ = write!(
            svg,
            r#"<rect class="request" x="{:.2}" y="{y:.1}" width="{:.2}" height="5" fill="{colour}" stroke="{colour}"{dash}><title>request {} ({label}), cost {}: sent {sent:.3} ms, answered {}</title></rect>"#,
            x(sent),
            (x(done) - x(sent)).max(1.5),
            r.id,
            r.cost,
            r.answer
                .map_or_else(|| "never".to_owned(), |(t, _)| format!("{:.3} ms", ms(t)))
        );
        if Some(r.id) == mark {
            let _ = write!(
                svg,
                r##"<rect class="marked" x="{:.2}" y="{:.1}" width="{:.2}" height="9" fill="none" stroke="#d50000" stroke-width="2"><title>request {}: the one the checker names</title></rect>"##,
                x(sent) - 2.0,
                y - 2.0,
                (x(done) - x(sent)).max(1.5) + 4.0,
                r.id
            );
        }
        if !h.events.is_empty() {
            continue;
        }
        if let Some(d) = decided_at(r) {
            let _ = write!(
                svg,
                r##"<line class="apply" x1="{0:.2}" x2="{0:.2}" y1="{1:.1}" y2="{2:.1}" stroke="#212121" stroke-width="1" opacity="0.7"><title>request {3}: applied at the store at {4:.3} ms</title></line>"##,
                x(ms(d)),
                y - 2.0,
                y + 7.0,
                r.id,
                ms(d)
            );
        }
    }
    applies(&mut svg, h, &rows, &x);
    chart(&mut svg, &frame.bound, &reqs, end, chart_top, &x);
    svg.push_str("</svg>");
    let title = &frame.title;
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif;margin:16px}} .legend span{{margin-right:14px}}</style>\
         </head><body><h3>{t}</h3><p>{d}</p><p class=\"legend\">\
         <span style=\"color:#2e7d32\">■ admitted</span><span style=\"color:#c62828\">■ denied</span>\
         <span style=\"color:#ef6c00\">■ let through (fail open, kill switch)</span>\
         <span style=\"color:#616161\">■ error</span><span style=\"color:#9e9e9e\">▭ never answered</span>\
         <span>| store apply</span><span style=\"color:#d50000\">✕ its reply lost</span>\
         <span style=\"color:#d50000\">□ the request a checker names</span>\
         <span style=\"color:#d50000\">⬚ violating window</span>\
         <span style=\"color:#8d6e00\">▮ fault</span></p>\n{svg}\n</body></html>\n",
        t = escape(title),
        d = escape(&frame.description),
    )
}

/// Every per-key store call of the drawn requests (`rows`: each one's bar height) the run's
/// events hold, on its request's bar.
fn applies(
    svg: &mut String,
    h: &History,
    rows: &std::collections::BTreeMap<u64, f64>,
    x: &dyn Fn(f64) -> f64,
) {
    let mut nth: std::collections::BTreeMap<u64, usize> = Default::default();
    for e in &h.events {
        let Event::Store {
            id,
            layer: Layer::PerKey,
            op,
            fate,
            ..
        } = &e.event
        else {
            continue;
        };
        let Some(&y) = rows.get(id) else {
            continue;
        };
        let n = nth.entry(*id).or_default();
        *n += 1;
        let t = x(ms(e.at));
        let (colour, what) = match fate {
            StoreFate::ReplyLost => ("#d50000", "applied, reply lost"),
            StoreFate::Errored | StoreFate::Dropped | StoreFate::Full => ("#9e9e9e", "not applied"),
            StoreFate::Delayed(_) => ("#6d4c41", "applied, reply delayed"),
            StoreFate::Served => ("#212121", "applied"),
        };
        let _ = write!(
            svg,
            r#"<line class="apply" x1="{t:.2}" x2="{t:.2}" y1="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="1.5" opacity="0.8"><title>request {id}, store call {n}: {op:?} {what} at {:.3} ms</title></line>"#,
            y - 3.0,
            y + 8.0,
            ms(e.at)
        );
        if matches!(fate, StoreFate::ReplyLost) {
            let _ = write!(
                svg,
                r#"<text x="{:.2}" y="{:.1}" fill="{colour}" font-size="11" text-anchor="middle">✕</text>"#,
                t,
                y - 4.0
            );
        }
    }
}

/// Admitted so far against the envelope, by store time.
fn chart(
    svg: &mut String,
    bound: &Envelope,
    reqs: &[&RequestRecord],
    end: f64,
    top: f64,
    x: &dyn Fn(f64) -> f64,
) {
    let mut admitted: Vec<(f64, u64)> = reqs
        .iter()
        .filter_map(|r| match r.layers.per_key {
            Some(Answer::Allowed { decided_at, .. }) => Some((ms(decided_at), r.cost)),
            _ => None,
        })
        .collect();
    admitted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let t0 = admitted.first().map_or(0.0, |a| a.0);
    let total: u64 = admitted.iter().map(|a| a.1).sum();
    let top_value = envelope_at(bound, end - t0).max(total as f64).max(1.0);
    let y = |v: f64| top + CHART - v / top_value * CHART;
    let _ = write!(
        svg,
        r##"<text x="8" y="{:.1}">admitted</text><line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#bdbdbd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{total}</text>"##,
        top + 12.0,
        WIDTH - RIGHT,
        top + CHART,
        top + CHART,
        LEFT - 4.0,
        y(total as f64) + 4.0
    );
    // The envelope from the first admission.
    let mut line = String::new();
    for i in 0..=100 {
        let t = t0 + (end - t0) * f64::from(i) / 100.0;
        let _ = write!(line, "{:.1},{:.1} ", x(t), y(envelope_at(bound, t - t0)));
    }
    let _ = write!(
        svg,
        r##"<polyline class="envelope" points="{line}" fill="none" stroke="#1565c0" stroke-dasharray="5 3"><title>the envelope from the first admission</title></polyline>"##
    );
    let mut steps = format!("{:.1},{:.1} ", x(t0), y(0.0));
    let mut sum = 0u64;
    for (t, c) in &admitted {
        let _ = write!(steps, "{:.1},{:.1} ", x(*t), y(sum as f64));
        sum += c;
        let _ = write!(steps, "{:.1},{:.1} ", x(*t), y(sum as f64));
    }
    let _ = write!(steps, "{:.1},{:.1}", x(end), y(sum as f64));
    let _ = write!(
        svg,
        r##"<polyline class="admitted" points="{steps}" fill="none" stroke="#2e7d32" stroke-width="2"><title>admitted so far</title></polyline><text x="{LEFT}" y="{:.1}">0 ms</text><text x="{:.1}" y="{:.1}" text-anchor="end">{end:.1} ms</text>"##,
        top + CHART + 16.0,
        WIDTH - RIGHT,
        top + CHART + 16.0
    );
}
