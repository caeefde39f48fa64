//! Fault kinds as typed values: names, located errors, the explorer's draws.

use ratelab_sim::faults::{FaultKind, FaultSpec, Shape};
use ratelab_sim::rng::{Draw, SimRng};
use ratelab_sim::{Scenario, ScenarioError};
use std::path::Path;

/// A two-gateway scenario with `faults` (a JSON array's text), parsed.
fn with_faults(faults: &str) -> Result<Scenario, ScenarioError> {
    let text = format!(
        r#"{{
  "description": "faults",
  "seeds": 1,
  "duration_ms": 1000,
  "gateways": 2,
  "policy": {{ "algorithm": "token_bucket", "capacity": 10, "refill_per_sec": 50 }},
  "store": {{ "path": "atomic", "replica": {{ "lag": {{ "min_us": 0, "max_us": 100 }} }} }},
  "clients": [ {{ "key": "k", "arrival": {{ "pattern": "constant", "rate_per_sec": 20 }} }} ],
  "faults": {faults}
}}"#
    );
    Scenario::parse(Path::new("faults.json"), &text)
}

#[test]
fn each_kind_is_named_as_scenario_files_name_it() {
    for &kind in FaultKind::ALL {
        let serde_name = serde_json::to_value(kind).unwrap();
        assert_eq!(serde_name, kind.name(), "{kind:?}");
    }
}

#[test]
fn a_field_another_kind_takes_is_an_error_at_that_field() {
    let e = with_faults(
        r#"[
    { "kind": "store_crash", "at_ms": 100,
      "rate": 0.5, "restart_after_ms": 50 }
  ]"#,
    )
    .unwrap_err();
    assert_eq!(e.path, "faults[0].rate", "{e}");
    assert_eq!((e.line, e.column), (11, 12), "{e}");
    assert_eq!(
        e.message,
        "unknown field `rate`, expected `at_ms` or `restart_after_ms`"
    );
}

#[test]
fn a_missing_field_names_the_kind_and_the_field() {
    let e = with_faults(r#"[ { "kind": "partition", "at_ms": 1, "until_ms": 2 } ]"#).unwrap_err();
    assert_eq!(e.path, "faults[0]", "{e}");
    assert_eq!(e.message, "a partition fault needs `gateways`", "{e}");
}

#[test]
fn an_out_of_range_value_is_an_error_at_its_field() {
    let e = with_faults(r#"[ { "kind": "store_errors", "at_ms": 1, "until_ms": 2, "rate": 3 } ]"#)
        .unwrap_err();
    assert_eq!(e.path, "faults[0].rate", "{e}");
}

#[test]
fn an_unknown_kind_lists_the_kinds() {
    let e = with_faults(r#"[ { "kind": "meteor", "at_ms": 1 } ]"#).unwrap_err();
    assert_eq!(e.path, "faults[0].kind", "{e}");
    for &kind in FaultKind::ALL {
        assert!(e.message.contains(kind.name()), "{e}");
    }
}

#[test]
fn kind_may_come_last() {
    let first =
        with_faults(r#"[ { "kind": "pause", "at_ms": 1, "until_ms": 9, "node": 1 } ]"#).unwrap();
    let last =
        with_faults(r#"[ { "at_ms": 1, "until_ms": 9, "node": 1, "kind": "pause" } ]"#).unwrap();
    let json = |sc: &Scenario| serde_json::to_string(&sc.spec().faults).unwrap();
    assert_eq!(json(&first), json(&last));
    let e = with_faults(r#"[ { "at_ms": 1, "until_ms": 9, "node": 7, "kind": "pause" } ]"#)
        .unwrap_err();
    assert_eq!(e.path, "faults[0].node", "{e}");
    assert!(e.message.contains("gateway 7 does not exist"), "{e}");
}

#[test]
fn checks_that_span_the_scenario_are_located_in_the_fault() {
    let e = with_faults(
        r#"[ { "kind": "partition", "at_ms": 1, "until_ms": 9, "gateways": [0, 5] } ]"#,
    )
    .unwrap_err();
    assert_eq!(e.path, "faults[0].gateways[1]", "{e}");
    let e = with_faults(r#"[ { "kind": "kill_switch", "at_ms": 9, "until_ms": 9 } ]"#).unwrap_err();
    assert_eq!(e.path, "faults[0].until_ms", "{e}");
    assert_eq!(e.message, "until_ms 9 is not after at_ms 9");
    let e = with_faults(r#"[ { "kind": "clock", "gateway": 1 } ]"#).unwrap_err();
    assert_eq!(
        e.message,
        "a clock fault needs `offset_ms`, `drift_ppm` or both"
    );
}

/// Every kind's draw makes a fault its own checks accept, and that reads back as written.
#[test]
fn every_drawn_fault_is_valid_and_round_trips() {
    let shape = Shape {
        duration_ms: 1_000,
        gateways: 2,
    };
    let mut d = Draw(SimRng::new(7, 1));
    for round in 0..50 {
        for &kind in FaultKind::ALL {
            let at = d.int(0, 998);
            let until = at + 1 + d.int(0, 998 - at);
            let f = kind.draw(&mut d, (at, until), &shape);
            assert_eq!(f.kind(), kind);
            let text = serde_json::to_string(&[&f]).unwrap();
            let sc = with_faults(&text).unwrap_or_else(|e| panic!("round {round}: {text}: {e}"));
            let back: &FaultSpec = &sc.spec().faults[0];
            assert_eq!(serde_json::to_string(&[back]).unwrap(), text);
        }
    }
}

/// A full partition inside a one-way one on the same gateway: when the inner one heals, the
/// outer one still holds the link (faults that overlap hold what they cut together).
#[test]
fn overlapping_faults_on_one_link_hold_it_until_the_last_ends() {
    let text = r#"{
  "description": "overlap",
  "seeds": 1,
  "duration_ms": 1000,
  "policy": { "algorithm": "token_bucket", "capacity": 1000, "refill_per_sec": 1000 },
  "store": { "path": "atomic", "timeout_ms": 20 },
  "clients": [ { "key": "k", "arrival": { "pattern": "constant", "rate_per_sec": 100 } } ],
  "faults": [
    { "kind": "asymmetric_partition", "at_ms": 0, "until_ms": 900, "gateways": [0] },
    { "kind": "partition", "at_ms": 100, "until_ms": 200, "gateways": [0] }
  ]
}"#;
    let sc = Scenario::parse(Path::new("overlap.json"), text).unwrap();
    let (_, h) = ratelab_sim::run(&sc, 1, Default::default());
    let admitted_between = |from: u64, until: u64| {
        h.requests
            .iter()
            .filter(|r| {
                let sent = r.sent_at.as_u64() / 1_000_000;
                sent >= from && sent < until
            })
            .filter(|r| {
                matches!(
                    r.answer,
                    Some((_, ratelab_sim::history::Answer::Allowed { .. }))
                )
            })
            .count()
    };
    assert_eq!(admitted_between(300, 850), 0, "the one-way cut still holds");
    assert!(admitted_between(920, 1000) > 0, "the link heals at 900");
}

#[test]
fn a_field_written_twice_is_an_error_wherever_kind_is() {
    for faults in [
        r#"[ { "kind": "store_crash", "at_ms": 100, "at_ms": 200, "restart_after_ms": 50 } ]"#,
        r#"[ { "at_ms": 100, "at_ms": 200, "kind": "store_crash", "restart_after_ms": 50 } ]"#,
    ] {
        let e = with_faults(faults).unwrap_err();
        assert!(e.path.starts_with("faults[0]"), "{e}");
        assert_eq!(e.message, "duplicate field `at_ms`", "{e}");
    }
}

/// The builder writes every kind: one constructor each (the match has no catch-all, so a new
/// kind needs its constructor here), each giving a fault of its kind that a scenario built
/// with it validates, as the file with that fault would; and the explorer's typed draws go in
/// as they are.
#[test]
fn the_builder_writes_every_fault_kind() {
    use ratelab_sim::values::NodeName;
    use ratelab_sim::{Client, Fault};
    for &kind in FaultKind::ALL {
        let fault = match kind {
            FaultKind::StoreErrors => Fault::store_errors(100, 200).rate(0.5),
            FaultKind::StoreTimeouts => Fault::store_timeouts(100, 200),
            FaultKind::LostReplies => Fault::lost_replies(100, 200),
            FaultKind::PacketLoss => Fault::packet_loss(100, 200).rate(0.25),
            FaultKind::StoreLatency => Fault::store_latency(100, 200, 500, 2_000),
            FaultKind::StoreCrash => Fault::store_crash(100, 50),
            FaultKind::StoreFailover => Fault::store_failover(100, 50),
            FaultKind::Partition => Fault::partition(100, 200, [0]),
            FaultKind::AsymmetricPartition => Fault::asymmetric_partition(100, 200, [1]),
            FaultKind::Pause => Fault::pause(100, 200, NodeName::Gateway(1)),
            FaultKind::KillSwitch => Fault::kill_switch(100, 200, Some(vec![0])),
            FaultKind::Clock => Fault::clock(1, Some(-20), Some(500)),
        };
        let sc = Scenario::builder("every fault kind")
            .duration_ms(500)
            .gateways(2)
            .token_bucket(5, 10)
            .replica_lag_us(0, 100, false)
            .client(Client::key("k").constant(20))
            .fault(fault)
            .build()
            .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
        let spec = sc.spec();
        assert_eq!(spec.faults.len(), 1);
        assert_eq!(spec.faults[0].kind(), kind);
        // Through JSON, the file with that fault reads back the same.
        let json = serde_json::to_value(spec).unwrap();
        let again = Scenario::from_spec(Path::new("x"), serde_json::from_value(json).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
        assert_eq!(again.spec().faults[0].kind(), kind);
    }
    let out_of_range = Scenario::builder("a clock far off")
        .duration_ms(500)
        .token_bucket(5, 10)
        .client(Client::key("k").constant(20))
        .fault(Fault::clock(0, Some(4_000_000), None))
        .build()
        .unwrap_err()
        .to_string();
    assert!(out_of_range.contains("offset_ms"), "{out_of_range}");
    // A typed draw goes in as it is.
    let mut d = Draw(SimRng::new(7, 1));
    let shape = Shape {
        duration_ms: 1_000,
        gateways: 2,
    };
    for &kind in FaultKind::ALL {
        let drawn = kind.draw(&mut d, (100, 300), &shape);
        let f = Fault::from(drawn.clone());
        let sc = Scenario::builder("drawn")
            .duration_ms(1_000)
            .gateways(2)
            .token_bucket(5, 10)
            .replica_lag_us(0, 100, false)
            .client(Client::key("k").constant(20))
            .fault(f)
            .build();
        let sc = sc.unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
        assert_eq!(
            serde_json::to_value(&sc.spec().faults[0]).unwrap(),
            serde_json::to_value(&drawn).unwrap()
        );
    }
}
