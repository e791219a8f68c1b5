//! `spindle status --watch --json` against a running domain: it shows the members, the
//! leader and a topic's readers, and when a member process is killed for real (SIGKILL),
//! the view change that removes it. No timing is asserted; every wait is bounded.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_spindle");
const IDL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../topics/idl/avionics.idl");
/// Bound on each wait for what status prints.
const WAIT: Duration = Duration::from_secs(90);

/// Kills the child when the test ends, however it ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn config(dir: &Path, node: u32, port: u16) -> String {
    let path = dir.join(format!("node{node}.toml"));
    let fabric = "[fabric]\nsuspect_floor_ms = 1000\nsuspect_ceiling_ms = 5000\n";
    let text = if node == 1 {
        format!("node_id = 1\ntransport = \"tcp\"\nlisten = \"127.0.0.1:{port}\"\nbootstrap = [1]\n{fabric}")
    } else {
        format!("node_id = {node}\ntransport = \"tcp\"\nlisten = \"127.0.0.1:0\"\n\n[[contacts]]\nnode = 1\naddress = \"127.0.0.1:{port}\"\n\n{fabric}")
    };
    std::fs::write(&path, text).expect("write config");
    path.to_string_lossy().to_string()
}

fn sub(cfg: &str) -> Guard {
    Guard(
        Command::new(BIN)
            .args([
                "sub",
                "--config",
                cfg,
                "--idl",
                IDL,
                "--type",
                "Avionics::AirData",
            ])
            .args(["--topic", "AirData"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sub"),
    )
}

/// Waits until `g` says on stderr that it reads.
fn wait_reading(g: &mut Guard) {
    let stderr = g.0.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let found = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.starts_with("spindle sub: reading"));
    assert!(found, "sub ended before reading");
    // Keep draining so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
}

fn members(s: &Value) -> Vec<u64> {
    let mut m: Vec<u64> = s["view"]["members"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    m.sort_unstable();
    m
}

/// The next status line that satisfies `want`.
fn next_where(rx: &mpsc::Receiver<String>, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let l = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("status never showed {what}"));
        let v: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
        if want(&v) {
            return v;
        }
    }
}

#[test]
fn status_shows_the_view_and_the_view_change_when_a_member_is_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let (c1, c2, c3) = (
        config(dir.path(), 1, port),
        config(dir.path(), 2, port),
        config(dir.path(), 3, port),
    );
    let mut n1 = sub(&c1);
    wait_reading(&mut n1);
    let mut n3 = sub(&c3);
    wait_reading(&mut n3);
    let mut status = Guard(
        Command::new(BIN)
            .args([
                "status", "--config", &c2, "--topic", "AirData", "--watch", "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start status"),
    );
    let out = status.0.stdout.take().expect("stdout");
    let rx = common::line_channel(out);
    let before = next_where(&rx, "members 1 2 3 and both readers", |s| {
        members(s) == [1, 2, 3]
            && s["topics"]
                .as_array()
                .and_then(|t| t.iter().find(|t| t["topic"] == "AirData"))
                .is_some_and(|t| t["readers"].as_array().is_some_and(|r| r.len() == 2))
    });
    assert_eq!(before["node"], 2);
    assert!(before["view"]["leader"].is_u64(), "{before}");
    let vid = before["view"]["id"].as_u64().expect("view id");
    n3.0.kill().expect("kill node 3");
    let after = next_where(&rx, "the view without node 3", |s| members(s) == [1, 2]);
    assert!(
        after["view"]["id"].as_u64().expect("view id") > vid,
        "{after}"
    );
    let air = after["topics"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["topic"] == "AirData").cloned())
        .expect("AirData still has node 1's reader");
    assert_eq!(air["readers"].as_array().map(Vec::len), Some(1), "{after}");
    drop(status);
    drop(n1);
}

/// The scraped entry of `address` in a status line, if it has counters.
fn scraped<'a>(s: &'a Value, address: &str) -> Option<&'a Value> {
    s["participants"]
        .as_array()?
        .iter()
        .find(|p| p["source"] == address && p["counters"].is_object())
}

#[test]
fn status_shows_a_members_counters_scraped_from_its_metrics_endpoint_as_samples_flow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
    };
    let (port, metrics_port) = (free(), free());
    let c1 = config(dir.path(), 1, port);
    let metrics = format!("127.0.0.1:{metrics_port}");
    let mut text = std::fs::read_to_string(&c1).expect("node 1's config");
    text.push_str(&format!("\n[metrics]\nlisten = \"{metrics}\"\n"));
    std::fs::write(&c1, text).expect("write config");
    let (c2, c3) = (config(dir.path(), 2, port), config(dir.path(), 3, port));
    let mut n1 = sub(&c1);
    wait_reading(&mut n1);
    let mut status = Guard(
        Command::new(BIN)
            .args(["status", "--config", &c2, "--watch", "--json"])
            .args(["--metrics", &metrics, "--interval-ms", "100"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start status"),
    );
    let out = status.0.stdout.take().expect("stdout");
    let rx = common::line_channel(out);
    let first = next_where(&rx, "node 1's counters", |s| scraped(s, &metrics).is_some());
    let own = &first["participants"][0];
    assert_eq!(own["source"], "self", "{first}");
    assert!(own["counters"]["spindle_views_installed_total"].as_u64() >= Some(1));
    let before = scraped(&first, &metrics).expect("scraped")["counters"]
        ["spindle_samples_received_total"]
        .as_u64()
        .expect("a count");
    const N: u64 = 40;
    let publisher = Command::new(BIN)
        .args([
            "pub",
            "--config",
            &c3,
            "--idl",
            IDL,
            "--type",
            "Avionics::AirData",
        ])
        .args(["--topic", "AirData", "--rate", "100", "--timeout-s", "90"])
        .args(["--random", &N.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .expect("run pub");
    assert!(publisher.success(), "pub failed: {publisher}");
    let after = next_where(&rx, "node 1's counters moved by the samples", |s| {
        scraped(s, &metrics).is_some_and(|p| {
            p["counters"]["spindle_samples_received_total"].as_u64() >= Some(before + N)
                && p["counters"]["spindle_delivered_total"].as_u64() >= Some(N)
                && p["rates"].is_object()
        })
    });
    let p = scraped(&after, &metrics).expect("scraped");
    assert!(p["rates"]["delivered_per_s"].as_f64().is_some(), "{after}");
    drop(status);
    drop(n1);
}
