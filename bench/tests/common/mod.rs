//! What the multi-process tests of `spindle-group-vs` share: starting members that know
//! each other, and talking to them over stdin/stdout.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The binary under test.
pub const VS: &str = env!("CARGO_BIN_EXE_spindle-group-vs");
/// The failure detector's floor every member of these tests runs with: above the
/// scheduler stalls of a machine loaded by parallel tests and builds (250 ms was passed
/// there: a member starved that long at load 13 on 2 vCPUs; the default, 50 ms, is for
/// the benchmarks), so only the tests' own hangs, kills and cuts are suspected. Kills and
/// closed links are noticed at once whatever the floor.
pub const TEST_SUSPECT_FLOOR_MS: &str = "1000";
/// How long a member may take to print its address.
const ADDR_DEADLINE: Duration = Duration::from_secs(30);

/// A member process and the lines it prints.
pub struct Proc {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A stopped process must be resumed to be reaped promptly.
        let _ = signal(&self.child, "-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `sig` (`-STOP`, `-CONT`, ...) to `child`; true if `kill` succeeded.
pub fn signal(child: &Child, sig: &str) -> bool {
    Command::new("kill")
        .args([sig, &child.id().to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Writes one line to `p`'s stdin.
pub fn say(p: &mut Proc, line: &str) {
    let s = p.child.stdin.as_mut().expect("stdin");
    writeln!(s, "{line}").unwrap();
    s.flush().unwrap();
}

/// Starts members `1..=n` over `backend`, each logging its deliveries to
/// `dir/node-<id>.log` with its stderr from `stderr`, and tells every one of them the
/// others' addresses.
pub fn start_members(
    backend: &str,
    n: u32,
    dir: &Path,
    stderr: impl Fn() -> Stdio,
) -> BTreeMap<u32, Proc> {
    start_members_with(backend, n, dir, stderr, &[]).0
}

/// As [`start_members`], with `extra` arguments for every member (`--secret ...`); also
/// returns each member's address.
pub fn start_members_with(
    backend: &str,
    n: u32,
    dir: &Path,
    stderr: impl Fn() -> Stdio,
    extra: &[&str],
) -> (BTreeMap<u32, Proc>, BTreeMap<u32, String>) {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    start_members_as(backend, n, dir, stderr, |_| (Vec::new(), extra.clone()))
}

/// As [`start_members`], each member `id` run under the command prefix and with the
/// extra arguments `how(id)` gives (`ip netns exec NS`, `--listen ADDR`).
pub fn start_members_as(
    backend: &str,
    n: u32,
    dir: &Path,
    stderr: impl Fn() -> Stdio,
    how: impl Fn(u32) -> (Vec<String>, Vec<String>),
) -> (BTreeMap<u32, Proc>, BTreeMap<u32, String>) {
    let mut procs = BTreeMap::new();
    let mut addrs = Vec::new();
    for id in 1..=n {
        let (prefix, extra) = how(id);
        let mut cmd = match prefix.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(VS);
                c
            }
            None => Command::new(VS),
        };
        let mut child = cmd
            .args(["node", "--id", &id.to_string(), "--backend", backend])
            .args(["--messages", "0", "--log"])
            .arg(dir.join(format!("node-{id}.log")))
            .args(["--suspect-floor-ms", TEST_SUSPECT_FLOOR_MS])
            .args(&extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr())
            .spawn()
            .expect("start spindle-group-vs");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let addr = rx.recv_timeout(ADDR_DEADLINE).expect("ADDR line");
        let addr = addr.strip_prefix("ADDR ").expect("ADDR").to_string();
        addrs.push((id, addr));
        procs.insert(id, Proc { child, lines: rx });
    }
    let list: Vec<String> = addrs.iter().map(|(id, a)| format!("{id}={a}")).collect();
    let peers = format!("PEERS {}", list.join(" "));
    for p in procs.values_mut() {
        say(p, &peers);
    }
    (procs, addrs.into_iter().collect())
}

/// Waits (up to two minutes) until `p` prints the view of exactly `members`
/// (`VIEW <vid> <n> <members>`, members comma-separated).
pub fn wait_members(p: &Proc, members: &str, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let l = p
            .lines
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("{what}: no view {members}: {e}"));
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() == 4 && f[0] == "VIEW" && f[3] == members {
            return;
        }
    }
}

/// The delivery lines of a log; a last line cut short (a process that exited with part
/// of its buffer unwritten) is left out.
pub fn deliveries(log: &[u8]) -> Vec<String> {
    let whole = match log.iter().rposition(|b| *b == b'\n') {
        Some(end) => &log[..=end],
        None => &[],
    };
    String::from_utf8_lossy(whole)
        .lines()
        .filter(|l| !l.starts_with("VIEW"))
        .map(str::to_string)
        .collect()
}

/// Tells every member in `procs` to stop sending, waits (up to `deadline` each) until each
/// says `DONE` (it delivered every member's end marker), then lets them exit together and
/// asserts that each exited successfully.
pub fn finish_members(procs: &mut BTreeMap<u32, Proc>, backend: &str, deadline: Duration) {
    for p in procs.values_mut() {
        say(p, "STOP");
    }
    for (id, p) in procs.iter() {
        let until = std::time::Instant::now() + deadline;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match p.lines.recv_timeout(left) {
                Ok(l) if l == "DONE" => break,
                Ok(_) => {}
                Err(e) => panic!("{backend}: node {id} never finished: {e}"),
            }
        }
    }
    for p in procs.values_mut() {
        say(p, "EXIT");
    }
    for (id, p) in procs.iter_mut() {
        let status = p.child.wait().unwrap();
        assert!(
            status.success(),
            "{backend}: node {id} exited with {status}"
        );
    }
}

/// Runs a `spindle-group-perf` command to its end: asserts that it succeeded (naming
/// `what` and its stderr otherwise) and returns its result, the JSON object of its last
/// line.
pub fn perf_result(cmd: &mut Command, what: &str) -> serde_json::Value {
    let out = cmd.output().expect("start spindle-group-perf");
    assert!(
        out.status.success(),
        "{what}: exit {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().expect("a result line")).expect("JSON")
}
