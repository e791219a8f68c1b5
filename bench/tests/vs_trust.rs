//! A domain that admits only its own, across processes over tcp on loopback: three
//! members streaming in one atomic subgroup, then
//! - outsiders try to join: one without the domain secret, one with a wrong secret, one
//!   with the secret but claiming a live member's id — each is refused, and the members'
//!   views and delivered sequences are unchanged;
//! - a process connects to the members' ports and sends garbage, half a frame, a huge
//!   length and valid-looking frames with wrong ids — the members keep running and
//!   deliver the same sequence.
//!
//! The members' delivery logs (every delivered message with its view, and every view)
//! must be byte-for-byte identical and hold view 1 only.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::{finish_members, say, start_members_with, Proc, VS};

const SECRET: &str = "the avionics domain's shared secret";
/// How long an outsider keeps trying to join (it retries every 50 ms) before it is
/// killed. A join that were admitted would show as a new view in the members' logs.
const OUTSIDER_TRIES: Duration = Duration::from_secs(4);

/// Waits until `p` prints `VIEW <vid> ...`; returns the member list.
fn wait_view(p: &Proc, vid: u32, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let l = p
            .lines
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("{what}: no view {vid}: {e}"));
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() == 4 && f[0] == "VIEW" && f[1] == vid.to_string() {
            return f[3].to_string();
        }
    }
}

/// Starts a process as node `id` with `extra` arguments, has it try to join through
/// `addrs` for [`OUTSIDER_TRIES`], kills it, and returns what it printed.
fn outsider(id: u32, extra: &[&str], addrs: &BTreeMap<u32, String>) -> Vec<String> {
    let mut child = Command::new(VS)
        .args(["node", "--id", &id.to_string(), "--backend", "tcp"])
        .args(["--messages", "0"])
        .args(extra)
        .env_remove("SPINDLE_DOMAIN_SECRET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the outsider");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut p = Proc { child, lines: rx };
    let addr = p
        .lines
        .recv_timeout(Duration::from_secs(30))
        .expect("the outsider's ADDR line");
    assert!(addr.starts_with("ADDR "), "{addr}");
    let contacts: Vec<String> = addrs.iter().map(|(n, a)| format!("{n}={a}")).collect();
    say(&mut p, &format!("JOIN {}", contacts.join(" ")));
    let until = Instant::now() + OUTSIDER_TRIES;
    let mut lines = Vec::new();
    while let Ok(l) = p
        .lines
        .recv_timeout(until.saturating_duration_since(Instant::now()))
    {
        lines.push(l);
    }
    drop(p); // killed and reaped
    lines
}

/// Connects to `addr` and sends `bytes`, then closes (or, with `hold`, returns the
/// stream still open).
fn hostile(addr: &str, bytes: &[u8], hold: bool) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).expect("connect to a member's port");
    let _ = s.write_all(bytes);
    hold.then_some(s)
}

/// A wire frame: `body_len: u32 LE, kind: u8, body`.
fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.push(kind);
    out.extend_from_slice(body);
    out
}

/// A plausible `Hello` from `node` to `target` (no regions).
fn hello(node: u32, target: u32, incarnation: u64) -> Vec<u8> {
    let mut body = 0x5350_444Cu32.to_le_bytes().to_vec();
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&node.to_le_bytes());
    body.extend_from_slice(&target.to_le_bytes());
    body.extend_from_slice(&incarnation.to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    frame(1, &body)
}

/// Every hostile opening a process may send to member `target`'s port.
fn hostile_inputs(target: u32) -> Vec<(&'static str, Vec<u8>)> {
    let mut seed = 0x5eed_u64 ^ u64::from(target);
    let mut garbage = Vec::new();
    for _ in 0..4096 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        garbage.push((seed >> 33) as u8);
    }
    let whole = hello(99, target, 7);
    let mut huge = u32::MAX.to_le_bytes().to_vec();
    huge.push(4);
    huge.extend_from_slice(&[0xAB; 64]);
    let mut write_first = 1u32.to_le_bytes().to_vec();
    write_first.extend_from_slice(&0u64.to_le_bytes());
    write_first.extend_from_slice(&[0xFF; 64]);
    vec![
        ("garbage", garbage),
        ("half a hello", whole[..whole.len() / 2].to_vec()),
        ("a huge length", huge),
        ("a hello meant for another node", hello(99, target + 100, 7)),
        (
            "a hello claiming the member's own id",
            hello(target, target, 7),
        ),
        (
            "a hello claiming a live member's id",
            hello(target % 3 + 1, target, 0xdead),
        ),
        ("a write before any hello", frame(4, &write_first)),
        ("a noise message of the wrong length", {
            let mut m = 56u16.to_le_bytes().to_vec();
            m.extend_from_slice(&[0x42; 56]);
            m
        }),
    ]
}

/// Reads the members' logs, checks they are identical, hold view 1 only and deliveries
/// of members 1..=3 only; returns the number of deliveries.
fn check_logs(dir: &std::path::Path, what: &str) -> usize {
    let logs: BTreeMap<u32, Vec<u8>> = (1..=3)
        .map(|id| {
            (
                id,
                std::fs::read(dir.join(format!("node-{id}.log"))).unwrap(),
            )
        })
        .collect();
    let text = String::from_utf8_lossy(&logs[&1]).to_string();
    let views: Vec<&str> = text.lines().filter(|l| l.starts_with("VIEW")).collect();
    assert_eq!(views, vec!["VIEW 1 1,2,3"], "{what}: the view changed");
    let mut senders = std::collections::BTreeSet::new();
    let mut deliveries = 0;
    for l in text.lines().filter(|l| !l.starts_with("VIEW")) {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f.len(), 4, "{what}: bad log line {l:?}");
        assert_eq!(f[0], "1", "{what}: a delivery outside view 1: {l:?}");
        senders.insert(f[2].to_string());
        deliveries += 1;
    }
    assert_eq!(
        senders.into_iter().collect::<Vec<_>>(),
        vec!["1", "2", "3"],
        "{what}: deliveries from the members, and only them"
    );
    for id in [2, 3] {
        assert!(
            logs[&id] == logs[&1],
            "{what}: node {id} delivered another sequence than node 1"
        );
    }
    deliveries
}

fn domain(
    name: &str,
    extra: &[&str],
) -> (
    std::path::PathBuf,
    BTreeMap<u32, Proc>,
    BTreeMap<u32, String>,
) {
    let dir = std::env::temp_dir().join(format!("spindle-trust-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (procs, addrs) = start_members_with("tcp", 3, &dir, Stdio::inherit, extra);
    for (id, p) in &procs {
        assert_eq!(wait_view(p, 1, &format!("{name} node {id}")), "1,2,3");
    }
    (dir, procs, addrs)
}

#[test]
fn outsiders_without_the_secret_are_refused_and_the_domain_is_unchanged() {
    let (dir, mut procs, addrs) = domain("outsiders", &["--secret", SECRET]);
    let attempts: [(&str, u32, Vec<&str>); 3] = [
        ("no secret", 4, vec![]),
        (
            "a wrong secret",
            5,
            vec!["--secret", "a guess at the domain's secret"],
        ),
        // Knows the secret, but claims live member 2's id: the live one is kept.
        ("a live member's id", 2, vec!["--secret", SECRET]),
    ];
    for (what, id, extra) in attempts {
        let printed = outsider(id, &extra, &addrs);
        assert!(
            !printed.iter().any(|l| l.starts_with("VIEW")),
            "an outsider with {what} was admitted: {printed:?}"
        );
    }
    finish_members(&mut procs, "tcp with a secret", Duration::from_secs(120));
    let deliveries = check_logs(&dir, "after the outsiders");
    assert!(deliveries > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

fn hostile_connections_leave_the_domain_intact(name: &str, extra: &[&str]) {
    let (dir, mut procs, addrs) = domain(name, extra);
    let mut held = Vec::new();
    for (id, addr) in &addrs {
        for (what, bytes) in hostile_inputs(*id) {
            // Half a frame stays open while the rest goes on.
            if let Some(s) = hostile(addr, &bytes, what.starts_with("half")) {
                held.push(s);
            }
        }
    }
    // Let the members stream on with the half frames still open, then close them; the
    // members must all still finish (each delivers every member's end marker).
    std::thread::sleep(Duration::from_millis(500));
    drop(held);
    finish_members(&mut procs, name, Duration::from_secs(120));
    let deliveries = check_logs(&dir, name);
    assert!(deliveries > 0, "{name}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_connections_leave_an_open_domain_running_and_intact() {
    hostile_connections_leave_the_domain_intact("hostile-open", &[]);
}

#[test]
fn hostile_connections_leave_a_secret_domain_running_and_intact() {
    hostile_connections_leave_the_domain_intact("hostile-secret", &["--secret", SECRET]);
}
