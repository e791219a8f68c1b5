//! Process plumbing for the interop tests: start a peer, wait for its lines, stop it,
//! and the configuration files of the Spindle participants and the bridge.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A child process whose standard output is read line by line; killed when dropped.
#[derive(Debug)]
pub struct Peer {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Peer {
    /// Starts `program args…`, its stdin a pipe (closing it stops bridge and publisher
    /// peers), its stderr inherited.
    pub fn start(name: &str, program: &Path, args: &[String]) -> Peer {
        Self::start_with_env(name, program, args, &[])
    }

    /// As [`Peer::start`], then waits up to `within` for the peer's `READY` line (a
    /// subscriber whose reader exists, a bridge on both sides).
    pub fn start_ready(name: &str, program: &Path, args: &[String], within: Duration) -> Peer {
        let mut peer = Self::start(name, program, args);
        peer.wait_line("READY", within);
        peer
    }

    /// As [`Peer::start`], with extra environment variables.
    pub fn start_with_env(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Peer {
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name} ({}): {e}", program.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take();
        let (tx, rx) = channel();
        let tag = name.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                eprintln!("[{tag}] {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer {
            name: name.to_string(),
            child,
            stdin,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Waits up to `timeout` for a line starting with `prefix`; panics (naming the peer
    /// and what it printed) when it does not come or the peer ends first.
    pub fn wait_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no line {prefix:?} within {timeout:?}; it printed {:?}",
                    self.name, self.seen
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{}: ended ({:?}) before printing {prefix:?}; it printed {:?}",
                    self.name,
                    self.child.wait(),
                    self.seen
                ),
            }
        }
    }

    /// Waits up to `timeout` for a line starting with one of `prefixes` (as
    /// [`Peer::wait_line`]); a subscriber's summary is `OK …` or `INCOMPLETE …`.
    pub fn wait_line_of(&mut self, prefixes: &[&str], timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if prefixes.iter().any(|p| l.starts_with(p)) {
                        return l;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no line {prefixes:?} within {timeout:?}; it printed {:?}",
                    self.name, self.seen
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{}: ended ({:?}) before printing {prefixes:?}; it printed {:?}",
                    self.name,
                    self.child.wait(),
                    self.seen
                ),
            }
        }
    }

    /// The lines it printed that a wait has seen so far.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// Sends SIGINT to this child (by its own pid; `kill -INT`), the way to end a process
    /// that stops on an interrupt and prints its totals then (`ddsperf`).
    pub fn interrupt(&mut self) {
        let st = Command::new("kill")
            .arg("-INT")
            .arg(self.child.id().to_string())
            .status()
            .unwrap_or_else(|e| panic!("{}: kill -INT: {e}", self.name));
        assert!(st.success(), "{}: kill -INT failed: {st:?}", self.name);
    }

    /// Sends one line on its stdin.
    pub fn send_line(&mut self, line: &str) {
        if let Some(s) = self.stdin.as_mut() {
            writeln!(s, "{line}").unwrap_or_else(|e| panic!("{}: stdin: {e}", self.name));
            let _ = s.flush();
        }
    }

    /// Sends `stop` and closes stdin (a graceful stop for the bridge and publishers).
    pub fn close_stdin(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = writeln!(s, "stop");
        }
    }

    /// Closes stdin and waits up to `timeout` for the exit; kills it after that.
    pub fn finish(mut self, timeout: Duration) -> (ExitStatus, Vec<String>) {
        self.close_stdin();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(l);
                }
                return (st, std::mem::take(&mut self.seen));
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "{}: did not exit within {timeout:?}; printed {:?}",
                    self.name, self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Kills only this child, by its own handle (its pid), if it still runs.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The `PROBLEM …` lines among a checking peer's output (its checker's findings: a sample
/// out of order, a wrong key or payload, an unexpected dispose).
pub fn problem_lines(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| l.starts_with("PROBLEM"))
        .map(String::as_str)
        .collect()
}

/// Panics, naming `peer` and quoting the lines, when `lines` hold any `PROBLEM` line: a
/// checker's finding fails the test whatever the peer's exit status and summary say.
pub fn assert_no_problems(peer: &str, lines: &[String]) {
    let problems = problem_lines(lines);
    assert!(
        problems.is_empty(),
        "{peer} reported {} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// A fresh directory for one test's files.
pub fn test_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spindle-interop-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("test dir");
    dir
}

/// The failure detector's floor in the tests' Spindle configs (ms of silence before a
/// peer is suspected): on the shared, loaded machine the default let a member suspect a
/// busy bridge after 52 ms and exclude it mid-run.
pub const SUSPECT_FLOOR_MS: u64 = 500;

/// Writes the Spindle participant config of `node` in shm namespace `ns` (node 1 starts
/// the domain; the others join through it) and returns its path.
pub fn spindle_config(dir: &Path, ns: &str, node: u32) -> PathBuf {
    let path = dir.join(format!("spindle-{node}.toml"));
    let membership = if node == 1 {
        "bootstrap = [1]".to_string()
    } else {
        format!("[[contacts]]\nnode = 1\naddress = \"@spindle-{ns}-1\"")
    };
    let text = format!(
        "domain_id = 0\nnode_id = {node}\ntransport = \"shm\"\nlisten = \"{ns}\"\n\
         entity_timeout_ms = 30000\n{membership}\n\
         [fabric]\nsuspect_floor_ms = {SUSPECT_FLOOR_MS}\n"
    );
    std::fs::write(&path, text).expect("write spindle config");
    path
}

/// Writes a bridge config for the interop topic (`direction` as in the TOML) on RTPS
/// domain `rtps_domain`, restricted to loopback, and returns its path.
pub fn bridge_config(
    dir: &Path,
    name: &str,
    rtps_domain: u16,
    spindle: &Path,
    direction: &str,
) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = format!(
        "[rtps]\ndomain_id = {rtps_domain}\nonly_networks = [\"127.0.0.1\"]\n\n\
         [spindle]\nconfig = \"{}\"\n\n\
         [[topic]]\nname = \"{}\"\ntype_name = \"{}\"\nkeyed = true\nkey = [\"string\"]\n\
         direction = \"{direction}\"\nreliability = \"reliable\"\n",
        spindle.display(),
        crate::TOPIC,
        crate::TYPE_NAME
    );
    std::fs::write(&path, text).expect("write bridge config");
    path
}

/// A shm namespace unique to this test process and `tag`.
pub fn namespace(tag: &str) -> String {
    format!("interop-{tag}-{}", std::process::id())
}

/// A Cyclone DDS configuration restricted to loopback (the `lo` interface, no multicast,
/// unicast discovery to 127.0.0.1), written into `dir`; returns the `CYCLONEDDS_URI`.
/// With `SPINDLE_CYCLONE_TRACE` set (Cyclone tracing categories, e.g. `trace`), each
/// Cyclone process writes its trace to `dir/cyclone-trace-PID.log`.
pub fn cyclone_uri(dir: &Path) -> String {
    let path = dir.join("cyclonedds.xml");
    let trace = match std::env::var("SPINDLE_CYCLONE_TRACE") {
        Ok(cats) => format!(
            "<Tracing><Category>{cats}</Category><OutputFile>{}</OutputFile></Tracing>",
            dir.join("cyclone-trace-${CYCLONEDDS_PID}.log").display()
        ),
        Err(_) => String::new(),
    };
    std::fs::write(
        &path,
        format!("<CycloneDDS><Domain id=\"any\"><General><Interfaces><NetworkInterface name=\"lo\"/>\
         </Interfaces><AllowMulticast>false</AllowMulticast></General><Discovery><Peers>\
         <Peer address=\"127.0.0.1\"/></Peers><ParticipantIndex>auto</ParticipantIndex>\
         <MaxAutoParticipantIndex>20</MaxAutoParticipantIndex></Discovery>{trace}</Domain></CycloneDDS>"
        ),
    )
    .expect("write cyclone config");
    format!("file://{}", path.display())
}

/// The Python of the virtualenv with Cyclone DDS's binding that the CDR cross-check uses
/// (topics/tests/crosscheck/setup.sh builds it when missing), or why it cannot be had.
pub fn cyclone_python() -> Result<PathBuf, String> {
    let setup = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topics/tests/crosscheck/setup.sh");
    let out = Command::new("bash")
        .arg(&setup)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", setup.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            setup.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_string();
    Ok(PathBuf::from(path))
}

/// The Cyclone peer script (`interop-tests/cyclone/cyclone_peer.py`).
pub fn cyclone_peer_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cyclone/cyclone_peer.py")
}

/// Distinct RTPS domain ids one test run may use ([`rtps_domain`]'s offsets).
pub const RTPS_DOMAINS_PER_RUN: u16 = 10;

/// The RTPS domain id of interop test `offset` (below [`RTPS_DOMAINS_PER_RUN`], distinct
/// per test across the test files): a multiple of [`RTPS_DOMAINS_PER_RUN`] picked by the
/// test process's pid, plus `offset`, so two test runs at once (two worktrees, two CI
/// jobs) rarely share a domain and one run's tests never do. At most 209: Cyclone DDS
/// refuses domain ids whose ports pass 65535 (above 232).
pub fn rtps_domain(offset: u16) -> u16 {
    assert!(
        offset < RTPS_DOMAINS_PER_RUN,
        "offsets below RTPS_DOMAINS_PER_RUN keep the tests of one run apart"
    );
    10 + (std::process::id() % 20) as u16 * RTPS_DOMAINS_PER_RUN + offset
}
