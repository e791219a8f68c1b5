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

/// The failure detector's floor of every child of these tests, in ms: above the scheduler
/// stalls of a shared 2-core machine loaded by builds and parallel tests (live children
/// went 300 ms without a frame reaching a peer at load 9–13 and were excluded, in
/// `dare_processes` and `logged_processes`). A SIGKILL is noticed at once by the end of
/// the killed process's streams, whatever the floor; only a SIGSTOPped child waits for it.
pub const CHILD_SUSPECT_FLOOR_MS: u64 = 5_000;

/// Makes `cfg` suspect a silent peer only after [`CHILD_SUSPECT_FLOOR_MS`].
pub fn tolerate_stalls(cfg: &mut ParticipantConfig) {
    cfg.fabric.suspect_floor_ms = CHILD_SUSPECT_FLOOR_MS;
    cfg.fabric.suspect_ceiling_ms = cfg.fabric.suspect_ceiling_ms.max(CHILD_SUSPECT_FLOOR_MS);
}

/// A child's tcp configuration: it listens on its own address of `members`
/// ([`loopback_members`]), knows every member as a contact, and tolerates stalls
/// ([`tolerate_stalls`]).
pub fn member_config(id: u32, members: &str) -> ParticipantConfig {
    let mut cfg = ParticipantConfig::new(id, Transport::Tcp, String::new());
    tolerate_stalls(&mut cfg);
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
