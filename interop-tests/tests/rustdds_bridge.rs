//! RustDDS ⇄ Spindle through the RTPS bridge: each side a separate process speaking only
//! its own stack (`interop-rustdds-peer`, `interop-spindle-peer`, `interop-bridge`).
//!
//! Counts: [`COUNT`] = 10,000 samples per writer, as the issue asks (both tests together
//! took about 5 s in a debug build on the shared 2-core machine; a subscriber gives up
//! after [`TIMEOUT_S`]). Set `INTEROP_SAMPLES` to run another count.
//!
//! RTPS traffic stays on loopback: every RustDDS participant (peers and bridge) is built
//! with `with_only_networks([127.0.0.1])`, so it joins and sends multicast only on `lo`
//! and advertises only 127.0.0.1 locators (its unicast sockets bind the wildcard address,
//! but no peer is ever told another address). Each test has its own RTPS domain id
//! ([`rtps_domain`]) and Spindle shm namespace.

use std::path::Path;
use std::time::Duration;

use spindle_interop_tests::procs::{
    assert_no_problems, bridge_config, namespace, rtps_domain, spindle_config, test_dir, Peer,
};

/// Samples per writer (see the module docs).
const COUNT: u64 = 10_000;
/// Payload bytes per sample.
const PAYLOAD_BYTES: usize = 100;
/// How long a subscriber waits for everything.
const TIMEOUT_S: u64 = 90;

fn count() -> u64 {
    std::env::var("INTEROP_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(COUNT)
}

fn exe(name: &str) -> &'static Path {
    Path::new(match name {
        "bridge" => env!("CARGO_BIN_EXE_interop-bridge"),
        "rustdds" => env!("CARGO_BIN_EXE_interop-rustdds-peer"),
        _ => env!("CARGO_BIN_EXE_interop-spindle-peer"),
    })
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

const START: Duration = Duration::from_secs(60);

/// A subscriber's summary line: `OK …` or `INCOMPLETE …`.
const SUMMARY: &[&str] = &["OK", "INCOMPLETE"];

/// Publishers print `MATCHED` and wait for `go` (see `interop-rustdds-peer`).
const GO: &[(&str, &str)] = &[("INTEROP_WAIT_GO", "1")];

/// Two RustDDS writers → bridge → two Spindle readers: every sample, in order per
/// writer, same key and bytes, the disposes as disposes, and both Spindle readers in one
/// order (the bridge puts what comes from RTPS into Spindle's total order).
#[test]
fn rustdds_writers_reach_spindle_readers_through_the_bridge() {
    let n = count();
    let dir = test_dir("rustdds-to-spindle");
    let ns = namespace("r2s");
    let domain = rtps_domain(0);
    let c1 = spindle_config(&dir, &ns, 1);
    let c2 = spindle_config(&dir, &ns, 2);
    let c3 = spindle_config(&dir, &ns, 3);
    let bcfg = bridge_config(&dir, "bridge", domain, &c3, "rtps_to_spindle");
    let args = |c: &Path| {
        vec![
            s("sub"),
            s(c.display()),
            s(2),
            s(n),
            s(PAYLOAD_BYTES),
            s(TIMEOUT_S),
        ]
    };
    let mut sub1 = Peer::start_ready("spindle-sub-1", exe("spindle"), &args(&c1), START);
    let mut sub2 = Peer::start_ready("spindle-sub-2", exe("spindle"), &args(&c2), START);
    let mut bridge = Peer::start_ready("bridge", exe("bridge"), &[s(bcfg.display())], START);
    let mut pubs: Vec<Peer> = (1..=2)
        .map(|w| {
            Peer::start_with_env(
                &format!("rustdds-pub-{w}"),
                exe("rustdds"),
                &[s("pub"), s(domain), s(w), s(n), s(PAYLOAD_BYTES)],
                GO,
            )
        })
        .collect();
    // Write once both sides know each other: a reliable RTPS reader takes a writer's
    // samples only after it matched the writer.
    for p in &mut pubs {
        p.wait_line("MATCHED", START);
    }
    bridge.wait_line("MATCHED rtps_writers=2", START);
    for p in &mut pubs {
        p.send_line("go");
    }
    let r1 = sub1.wait_line_of(SUMMARY, Duration::from_secs(TIMEOUT_S + 30));
    let r2 = sub2.wait_line_of(SUMMARY, Duration::from_secs(TIMEOUT_S + 30));
    for p in pubs {
        let (st, _) = p.finish(Duration::from_secs(30));
        assert!(st.success(), "RustDDS publisher failed: {st:?}");
    }
    // The bridge's counters before the subscribers' verdicts: they say where samples
    // stopped when a subscriber is short of some.
    let (st, lines) = bridge.finish(Duration::from_secs(30));
    let stats = lines
        .iter()
        .find(|l| l.starts_with("STATS"))
        .cloned()
        .unwrap_or_else(|| format!("no STATS line: {st:?} {lines:?}"));
    assert_no_problems("Spindle subscriber 1", sub1.seen());
    assert_no_problems("Spindle subscriber 2", sub2.seen());
    for r in [&r1, &r2] {
        assert!(
            r.starts_with("OK") && r.contains(&format!("received={}", 2 * n)),
            "{r} (bridge: {stats})"
        );
    }
    let order = |l: &str| l.split("order=").nth(1).map(str::to_string);
    assert_eq!(
        order(&r1),
        order(&r2),
        "the Spindle readers disagree on the order"
    );
    assert!(st.success(), "bridge: {st:?} {lines:?}");
    assert!(
        stats.contains(&format!("into_spindle={}", 2 * (n + 1))),
        "{stats}"
    );
    assert!(stats.contains("dropped=0"), "{stats}");
    assert!(stats.contains("rtps_gaps=0"), "{stats}");
    for sub in [sub1, sub2] {
        let (st, _) = sub.finish(Duration::from_secs(30));
        assert!(st.success(), "Spindle subscriber: {st:?}");
    }
}

/// A Spindle writer → bridge → a RustDDS reader: every sample, in order, same key and
/// bytes, the dispose as a dispose.
#[test]
fn a_spindle_writer_reaches_a_rustdds_reader_through_the_bridge() {
    let n = count();
    let dir = test_dir("spindle-to-rustdds");
    let ns = namespace("s2r");
    let domain = rtps_domain(1);
    let c1 = spindle_config(&dir, &ns, 1);
    let c2 = spindle_config(&dir, &ns, 2);
    let c3 = spindle_config(&dir, &ns, 3);
    let bcfg = bridge_config(&dir, "bridge", domain, &c2, "spindle_to_rtps");
    let mut sub = Peer::start_ready(
        "rustdds-sub",
        exe("rustdds"),
        &[
            s("sub"),
            s(domain),
            s(1),
            s(n),
            s(PAYLOAD_BYTES),
            s(TIMEOUT_S),
        ],
        START,
    );
    // The Spindle domain's first member, with its own participant (node 1) only as a
    // reader-less host; the writer waits until the bridge's RTPS writer has matched the
    // RustDDS reader (volatile: it gets only what is written after the match).
    let host = Peer::start_ready(
        "spindle-host",
        exe("spindle"),
        &[s("host"), s(c1.display())],
        START,
    );
    let mut bridge = Peer::start_ready("bridge", exe("bridge"), &[s(bcfg.display())], START);
    bridge.wait_line("MATCHED rtps_readers=1", START);
    sub.wait_line("MATCHED", START);
    let publisher = Peer::start(
        "spindle-pub",
        exe("spindle"),
        &[s("pub"), s(c3.display()), s(1), s(n), s(PAYLOAD_BYTES)],
    );
    let mut publisher = publisher;
    publisher.wait_line("SENT", Duration::from_secs(TIMEOUT_S));
    let (sub_st, sub_lines) = sub.finish(Duration::from_secs(TIMEOUT_S + 30));
    // The bridge's counters first: they say whether a lost sample left the bridge.
    let (st, lines) = bridge.finish(Duration::from_secs(30));
    assert_no_problems("the RustDDS subscriber", &sub_lines);
    let summary = sub_lines
        .iter()
        .rev()
        .find(|l| l.starts_with("OK") || l.starts_with("INCOMPLETE"));
    assert!(
        sub_st.success(),
        "RustDDS subscriber: {sub_st:?} {sub_lines:?}"
    );
    assert!(
        summary.is_some_and(|l| l.starts_with("OK")
            && l.contains(&format!("received={n}"))
            && l.contains("disposes=1")),
        "{summary:?}"
    );
    assert!(st.success(), "bridge: {st:?} {lines:?}");
    let stats = lines
        .iter()
        .find(|l| l.starts_with("STATS"))
        .expect("STATS line");
    assert!(stats.contains(&format!("into_rtps={}", n + 1)), "{stats}");
    assert!(stats.contains("dropped=0"), "{stats}");
    let (st, _) = publisher.finish(Duration::from_secs(30));
    assert!(st.success(), "Spindle publisher: {st:?}");
    let (st, _) = host.finish(Duration::from_secs(30));
    assert!(st.success(), "Spindle host: {st:?}");
}

/// Two bridges between the same RTPS domain and the same Spindle domain, both forwarding
/// both ways: each forwards the RustDDS writer's samples into Spindle once and the other
/// bridge's Spindle samples out once, and skips the rest — no loop (a loop would keep the
/// Spindle reader's count growing past 2 × N).
#[test]
fn two_bridges_both_ways_do_not_loop() {
    let n = count().min(1_000);
    let dir = test_dir("two-bridges");
    let ns = namespace("loop");
    let domain = rtps_domain(2);
    let c1 = spindle_config(&dir, &ns, 1);
    let ca = spindle_config(&dir, &ns, 2);
    let cb = spindle_config(&dir, &ns, 3);
    let mut counter = Peer::start_ready(
        "spindle-count",
        exe("spindle"),
        &[s("count"), s(c1.display()), s(2 * n), s(TIMEOUT_S)],
        START,
    );
    let ba = bridge_config(&dir, "bridge-a", domain, &ca, "both");
    let bb = bridge_config(&dir, "bridge-b", domain, &cb, "both");
    let mut a = Peer::start_ready("bridge-a", exe("bridge"), &[s(ba.display())], START);
    let mut b = Peer::start_ready("bridge-b", exe("bridge"), &[s(bb.display())], START);
    a.wait_line("BRIDGES 2", START);
    b.wait_line("BRIDGES 2", START);
    let mut publisher = Peer::start_with_env(
        "rustdds-pub",
        exe("rustdds"),
        &[s("pub"), s(domain), s(1), s(n), s(PAYLOAD_BYTES), s(2)],
        GO,
    );
    publisher.wait_line("MATCHED", START);
    // Each bridge's reader knows the publisher and both bridges' writers (its own too:
    // a bridge's readers and writers are two RTPS participants).
    a.wait_line("MATCHED rtps_writers=3", START);
    b.wait_line("MATCHED rtps_writers=3", START);
    publisher.send_line("go");
    let got = counter.wait_line("COUNT", Duration::from_secs(TIMEOUT_S + 30));
    assert_eq!(
        got,
        format!("COUNT {}", 2 * n),
        "each bridge forwards each sample once"
    );
    let (st, _) = publisher.finish(Duration::from_secs(30));
    assert!(st.success(), "RustDDS publisher: {st:?}");
    for bridge in [a, b] {
        let (st, lines) = bridge.finish(Duration::from_secs(30));
        assert!(st.success(), "bridge: {st:?} {lines:?}");
        let stats = lines
            .iter()
            .find(|l| l.starts_with("STATS"))
            .expect("STATS line");
        assert!(
            stats.contains(&format!("into_spindle={}", n + 1)),
            "{stats}"
        );
        // Out to RTPS: the other bridge's n samples, and its dispose unless the reader's
        // cache folded it into this bridge's own dispose of the same instance.
        let out: u64 = stats
            .split("into_rtps=")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|v| v.parse().ok())
            .expect("into_rtps");
        assert!(out == n || out == n + 1, "{stats}");
        assert!(stats.contains("dropped=0"), "{stats}");
    }
    let (st, _) = counter.finish(Duration::from_secs(30));
    assert!(st.success());
}
