//! Helpers the multi-process DCPS tests share (`rejoin_processes.rs`,
//! `bootstrap_processes.rs`): the members' addresses, a child's configuration from them,
//! and a child (the test binary re-run as one `#[ignore]`d test) whose stdout lines come
//! through a channel.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;

use spindle_dds_core::{Contact, ParticipantConfig, Transport};

/// `id=127.0.0.1:port,…` for `ids`, each on a port free when asked (see
/// [`loopback_port`]).
pub fn loopback_members(ids: &[u32]) -> String {
    ids.iter()
        .map(|id| format!("{id}=127.0.0.1:{}", loopback_port()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The lowest and highest port the tests pick from: below Linux's ephemeral range
/// (32768–60999 by default). A port the kernel hands out as the source of an outgoing
/// connection — the members' own dials — can then never take a member's listening port
/// between the test's pick and the child's bind (seen: "Address already in use" when a
/// member restarted on its port).
const TEST_PORTS: (u16, u16) = (20_000, 32_000);

/// A loopback port free when asked (bound, then released for a child to take), picked at
/// random from [`TEST_PORTS`], and never one this process handed out before.
pub fn loopback_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    for _ in 0..1_000 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let span = u64::from(TEST_PORTS.1 - TEST_PORTS.0);
        let port = TEST_PORTS.0 + (h.finish() % span) as u16;
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free loopback port in {TEST_PORTS:?} after 1,000 tries");
}

/// Member `id`'s tcp configuration from `members` (as [`loopback_members`] writes it):
/// it listens on its own address and knows everyone's.
pub fn member_config(id: u32, members: &str) -> ParticipantConfig {
    let mut cfg = ParticipantConfig::new(id, Transport::Tcp, String::new());
    for m in members.split(',') {
        let (n, a) = m.split_once('=').expect("id=address");
        let n: u32 = n.parse().expect("a node id");
        if n == id {
            cfg.listen = a.to_string();
        }
        cfg.contacts.push(Contact {
            node: n,
            address: a.to_string(),
        });
    }
    cfg
}

/// A child process and its stdout, line by line.
pub struct ChildProc {
    pub child: Child,
    pub stdin: ChildStdin,
    pub lines: mpsc::Receiver<String>,
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs this test binary's `#[ignore]`d test `test` as a child with `env`, its stdin a
/// pipe, its stderr to `stderr`.
pub fn spawn_child(test: &str, env: &[(&str, String)], stderr: Stdio) -> ChildProc {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    ChildProc {
        child,
        stdin,
        lines,
    }
}
