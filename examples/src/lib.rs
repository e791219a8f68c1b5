//! # spindle-examples — runnable applications
//!
//! * `dds_perf` (its code in [`perf`], shared with `spindle perf`): DCPS throughput,
//!   latency and the ping/pong round trip between two processes.
//! * `avionics` (`cargo run --release -p spindle-examples --bin avionics`): a small
//!   avionics domain of processes on this machine — air-data computers, an AHRS and a
//!   GNSS receiver publishing at rate, a flight-management node publishing the flight
//!   plan (a stored topic), and two displays — one air-data computer is killed mid-run,
//!   and the displays' logs show one identical order and the view change.
//!
//! The library part holds what the examples and their tests share: the check that readers
//! of a topic agree, and the latency histogram and percentiles of `dds_perf --pingpong`
//! ([`latency`]).
#![deny(missing_docs)]

pub mod latency;
pub mod perf;

use std::collections::{BTreeMap, BTreeSet};

/// One sample as a reader logged it: `<view_id> <order_index> <writer> <key> <writer_seq>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogLine {
    /// The view it was delivered in.
    pub view_id: u32,
    /// Its index in the topic subgroup's order in that view.
    pub order_index: u64,
    /// The writer (`node.writer_id`).
    pub writer: String,
    /// The instance key.
    pub key: String,
    /// The writer's sequence number.
    pub writer_seq: u64,
}

/// Parses a reader log; the error names the line.
pub fn parse_log(name: &str, text: &str) -> Result<Vec<LogLine>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let bad = || {
                format!(
                    "{name}:{}: {l:?} is not `<view_id> <order_index> <writer> <key> <writer_seq>`",
                    i + 1
                )
            };
            if f.len() != 5 {
                return Err(bad());
            }
            Ok(LogLine {
                view_id: f[0].parse().map_err(|_| bad())?,
                order_index: f[1].parse().map_err(|_| bad())?,
                writer: f[2].to_string(),
                key: f[3].to_string(),
                writer_seq: f[4].parse().map_err(|_| bad())?,
            })
        })
        .collect()
}

/// What [`check_agreement`] found for one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Agreement {
    /// Views every reader was in from start to end, whose samples were compared as sets.
    pub views_compared: Vec<u32>,
    /// Samples seen by every reader (same `(view_id, order_index)`, same content).
    pub common_samples: usize,
}

/// Checks that the readers of one topic agree: each log is in strictly increasing
/// `(view_id, order_index)` order; a position holds the same sample in every log; and in
/// every view that all readers spanned (after each one's first view and before each one's
/// last), they hold exactly the same samples. Returns what was compared, or every
/// disagreement found.
pub fn check_agreement(logs: &BTreeMap<String, Vec<LogLine>>) -> Result<Agreement, Vec<String>> {
    let mut problems = Vec::new();
    let mut at: BTreeMap<(u32, u64), (String, &LogLine)> = BTreeMap::new();
    for (name, log) in logs {
        for w in log.windows(2) {
            if (w[0].view_id, w[0].order_index) >= (w[1].view_id, w[1].order_index) {
                problems.push(format!(
                    "{name}: ({}, {}) comes before ({}, {}): not in total order",
                    w[0].view_id, w[0].order_index, w[1].view_id, w[1].order_index
                ));
            }
        }
        for l in log {
            match at.get(&(l.view_id, l.order_index)) {
                Some((other, o)) if *o != l => problems.push(format!(
                    "position ({}, {}): {other} has {:?}, {name} has {:?}",
                    l.view_id, l.order_index, o, l
                )),
                Some(_) => {}
                None => {
                    at.insert((l.view_id, l.order_index), (name.clone(), l));
                }
            }
        }
    }
    // Pairwise: in every view both readers spanned (after each one's first view and
    // before each one's last), they hold exactly the same samples.
    let mut agreement = Agreement::default();
    let named: Vec<(&String, &Vec<LogLine>)> = logs.iter().collect();
    let mut compared = BTreeSet::new();
    for (i, (na, a)) in named.iter().enumerate() {
        for (nb, b) in &named[i + 1..] {
            let (Some(af), Some(al), Some(bf), Some(bl)) =
                (a.first(), a.last(), b.first(), b.last())
            else {
                continue;
            };
            let from = af.view_id.max(bf.view_id);
            let to = al.view_id.min(bl.view_id);
            let views: BTreeSet<u32> = a
                .iter()
                .chain(b.iter())
                .map(|l| l.view_id)
                .filter(|v| *v > from && *v < to)
                .collect();
            for v in views {
                let sa: BTreeSet<&LogLine> = a.iter().filter(|x| x.view_id == v).collect();
                let sb: BTreeSet<&LogLine> = b.iter().filter(|x| x.view_id == v).collect();
                if sa != sb {
                    problems.push(format!(
                        "view {v}: {na} has {} samples, {nb} has {} (all-or-none broken)",
                        sa.len(),
                        sb.len()
                    ));
                }
                compared.insert(v);
            }
        }
    }
    agreement.views_compared = compared.into_iter().collect();
    let first = logs.values().next();
    agreement.common_samples = first.map_or(0, |f| {
        f.iter()
            .filter(|l| {
                logs.values().all(|o| {
                    o.binary_search_by(|x| {
                        (x.view_id, x.order_index).cmp(&(l.view_id, l.order_index))
                    })
                    .is_ok()
                })
            })
            .count()
    });
    if problems.is_empty() {
        Ok(agreement)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(lines: &[(u32, u64, u64)]) -> Vec<LogLine> {
        lines
            .iter()
            .map(|(v, i, s)| LogLine {
                view_id: *v,
                order_index: *i,
                writer: "2.1".into(),
                key: "7".into(),
                writer_seq: *s,
            })
            .collect()
    }

    #[test]
    fn agreeing_logs_pass_and_each_kind_of_disagreement_is_found() {
        let a = log(&[(2, 0, 1), (3, 0, 2), (3, 1, 3), (4, 0, 4)]);
        let b = log(&[(3, 0, 2), (3, 1, 3), (4, 0, 4), (5, 0, 5)]);
        let mut m = BTreeMap::new();
        m.insert("pfd".to_string(), a.clone());
        m.insert("mfd".to_string(), b.clone());
        let ok = check_agreement(&m).unwrap();
        assert_eq!(ok.common_samples, 3);
        // Out of order.
        m.insert("mfd".to_string(), log(&[(3, 1, 3), (3, 0, 2)]));
        assert!(check_agreement(&m).is_err());
        // Same position, different sample.
        m.insert("mfd".to_string(), log(&[(3, 0, 9)]));
        assert!(check_agreement(&m).is_err());
        // A sample missing in a view both spanned.
        let c = log(&[(2, 0, 1), (3, 0, 2), (4, 0, 4)]);
        m.insert("mfd".to_string(), c);
        let e = check_agreement(&m).unwrap_err();
        assert!(e.iter().any(|p| p.contains("all-or-none")), "{e:?}");
        assert!(parse_log("x", "1 2 3.1 4").is_err());
        assert_eq!(parse_log("x", "1 2 3.1 4 5\n").unwrap().len(), 1);
    }
}

/// The layout of the many-topics domain (`many_topics`): who writes and reads each topic.
pub mod many_topics {
    /// Participants in the domain; the last is killed between the two rounds.
    pub const PARTICIPANTS: u32 = 3;

    /// The participants (1-based) that read topic `i`: the one after its writer, and for
    /// every tenth topic the third one too.
    pub fn readers_of(i: usize) -> Vec<u32> {
        let n = PARTICIPANTS as usize;
        let mut r = vec![((i + 1) % n) as u32 + 1];
        if i % 10 == 0 {
            r.push(((i + 2) % n) as u32 + 1);
        }
        r
    }

    /// The participant that writes topic `i`.
    pub fn writer_of(i: usize) -> u32 {
        (i % PARTICIPANTS as usize) as u32 + 1
    }

    /// The name of topic `i` (and of its log files, `<node>-<name>.log`).
    pub fn topic_name(i: usize) -> String {
        format!("T{i:05}")
    }
}

pub mod large_samples {
    //! The shared plan of the `large_samples` example and its test.

    /// Participants (processes) of the domain.
    pub const PARTICIPANTS: u32 = 3;
    /// The one topic.
    pub const TOPIC: &str = "terrain-tiles";
    /// Every participant's `sample_bytes_max` (16 MiB).
    pub const SAMPLE_BYTES_MAX: usize = 16 << 20;

    /// The payload sizes participant `node` writes, in order: small and large
    /// interleaved, from 100 B to just under 16 MiB (a sample's 64-byte header and CDR
    /// framing ride in the same message).
    pub fn sizes(node: u32) -> Vec<usize> {
        let mut v = vec![100, 1 << 20, 2048, (16 << 20) - 4096, 300, 4 << 20];
        let k = node as usize % v.len();
        v.rotate_left(k);
        v
    }

    /// With `--kill`: how many times over each participant writes its [`sizes`].
    pub const KILL_ROUNDS: u32 = 2;
    /// With `--kill`: the participant SIGKILLed while it streams.
    pub const KILLED: u32 = 3;

    /// The payload sizes participant `node` writes when it writes its [`sizes`] `rounds`
    /// times over (sample `i` of it has index `i`).
    pub fn sizes_written(node: u32, rounds: u32) -> Vec<usize> {
        (0..rounds).flat_map(|_| sizes(node)).collect()
    }

    /// A payload of `len` bytes (at least 12) naming its writer and index, the rest a
    /// pattern of them.
    pub fn payload(node: u32, i: u64, len: usize) -> Vec<u8> {
        let mut p = Vec::with_capacity(len.max(12));
        p.extend_from_slice(&node.to_le_bytes());
        p.extend_from_slice(&i.to_le_bytes());
        let mut x = (u64::from(node) << 32) ^ i;
        while p.len() < len {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            p.push((x >> 56) as u8);
        }
        p
    }

    /// The writer and index a payload names.
    pub fn parse(p: &[u8]) -> Option<(u32, u64)> {
        let node = u32::from_le_bytes(p.get(..4)?.try_into().ok()?);
        let i = u64::from_le_bytes(p.get(4..12)?.try_into().ok()?);
        Some((node, i))
    }
}

/// The processes of a multi-process example: a child started with piped stdin and
/// stdout, its stdout read line by line on a thread of its own.
pub mod procs {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, ChildStdin, Command, Stdio};
    use std::sync::mpsc::Receiver;
    use std::time::{Duration, Instant};

    /// An error of the example drivers.
    pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

    /// One child process of the domain.
    #[derive(Debug)]
    pub struct Proc {
        /// Its name, for messages.
        pub name: String,
        /// The process.
        pub child: Child,
        /// Its stdin (`None` once closed).
        pub stdin: Option<ChildStdin>,
        /// Its stdout, line by line.
        pub lines: Receiver<String>,
    }

    impl Proc {
        /// Starts this executable again with `args`.
        pub fn spawn_self(name: &str, args: &[String]) -> Result<Proc, BoxError> {
            let mut child = Command::new(std::env::current_exe()?)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            let stdout = child.stdout.take().ok_or("child stdout")?;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
            Ok(Proc {
                name: name.to_string(),
                stdin: child.stdin.take(),
                child,
                lines: rx,
            })
        }

        /// Writes `line` to its stdin (ignored once the process is gone).
        pub fn say(&mut self, line: &str) {
            if let Some(s) = self.stdin.as_mut() {
                let _ = writeln!(s, "{line}");
                let _ = s.flush();
            }
        }

        /// The next line that starts with `word`, skipping others; an error naming the
        /// process after `timeout`.
        pub fn expect(&self, word: &str, timeout: Duration) -> Result<String, BoxError> {
            let deadline = Instant::now() + timeout;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.lines.recv_timeout(left) {
                    Ok(l) if l.starts_with(word) => return Ok(l),
                    Ok(_) => {}
                    Err(_) => return Err(format!("{}: no {word}", self.name).into()),
                }
            }
        }
    }

    /// A child left behind (the driver failed half-way) is killed, not orphaned.
    impl Drop for Proc {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// The configuration of member `node` of a domain that node 1 starts: `transport` is
    /// `tcp` or `shm`; the others join through node 1 at `contact`.
    pub fn member_config(
        node: u32,
        transport: &str,
        listen: &str,
        contact: &str,
    ) -> Result<spindle_dds_core::ParticipantConfig, BoxError> {
        let transport = match transport {
            "tcp" => spindle_dds_core::Transport::Tcp,
            "shm" => spindle_dds_core::Transport::Shm,
            t => return Err(format!("transport {t:?}: tcp or shm").into()),
        };
        let mut cfg = spindle_dds_core::ParticipantConfig::new(node, transport, listen);
        if node == 1 {
            cfg.bootstrap = vec![1];
        } else {
            cfg.contacts = vec![spindle_dds_core::Contact {
                node: 1,
                address: contact.to_string(),
            }];
        }
        Ok(cfg)
    }

    /// Tells the driver (this child's parent) `line` on stdout, flushed: the child's
    /// half of [`Proc::expect`].
    pub fn tell_parent(line: &str) -> Result<(), BoxError> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
        Ok(())
    }

    /// The driver's next line on stdin, trimmed (empty once the driver closed it): the
    /// child's half of [`Proc::say`].
    pub fn from_parent(stdin: &mut BufReader<std::io::Stdin>) -> String {
        let mut l = String::new();
        let _ = stdin.read_line(&mut l);
        l.trim().to_string()
    }

    /// A free port on loopback (for a tcp participant's listen address).
    pub fn free_port() -> Result<u16, BoxError> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    }

    /// Where a driver's members listen, and the contact through which node 1 is joined:
    /// over tcp a free loopback port per member, over shm one namespace for the domain
    /// (named by `tag` and the driver's process id).
    ///
    /// ```
    /// use spindle_examples::procs::Addresses;
    /// let shm = Addresses::new("shm", "doc")?;
    /// assert_eq!(shm.listen()?, shm.first());
    /// let tcp = Addresses::new("tcp", "doc")?;
    /// assert!(tcp.first().starts_with("127.0.0.1:"));
    /// assert_eq!(tcp.contact(), tcp.first());
    /// assert_ne!(tcp.listen()?, tcp.first());
    /// assert!(Addresses::new("udp", "doc").is_err());
    /// # Ok::<(), spindle_examples::procs::BoxError>(())
    /// ```
    #[derive(Debug, Clone)]
    pub struct Addresses {
        tcp: bool,
        namespace: String,
        first: String,
    }

    impl Addresses {
        /// The addresses of a domain over `transport` (`tcp` or `shm`).
        pub fn new(transport: &str, tag: &str) -> Result<Addresses, BoxError> {
            let tcp = match transport {
                "tcp" => true,
                "shm" => false,
                t => return Err(format!("transport {t:?}: tcp or shm").into()),
            };
            let namespace = format!("{tag}{}", std::process::id());
            let mut a = Addresses {
                tcp,
                first: String::new(),
                namespace,
            };
            a.first = a.listen()?;
            Ok(a)
        }

        /// Node 1's listen address.
        pub fn first(&self) -> &str {
            &self.first
        }

        /// A listen address for another member (over tcp, a new free port each call).
        pub fn listen(&self) -> Result<String, BoxError> {
            Ok(if self.tcp {
                format!("127.0.0.1:{}", free_port()?)
            } else {
                self.namespace.clone()
            })
        }

        /// Where the others reach node 1 to join.
        pub fn contact(&self) -> String {
            if self.tcp {
                self.first.clone()
            } else {
                spindle_dds_core::ParticipantConfig::shm_address(&self.namespace, 1)
            }
        }
    }
}

/// Where a domain driver puts its members' logs and data.
pub mod run_dir {
    use std::path::PathBuf;

    use crate::procs::BoxError;

    /// A run's directory: `--out DIR` as given, kept; or, without `--out`, a new one
    /// under the system's temporary directory, removed when the run succeeds and kept
    /// (and named) when it fails, for a look at what went wrong.
    #[derive(Debug)]
    pub struct RunDir {
        /// The directory (created).
        pub path: PathBuf,
        temporary: bool,
    }

    impl RunDir {
        /// `out`, or `<temp>/spindle-<name>-<pid>`; created if missing.
        pub fn new(out: Option<PathBuf>, name: &str) -> std::io::Result<RunDir> {
            let temporary = out.is_none();
            let path = out.unwrap_or_else(|| {
                std::env::temp_dir().join(format!("spindle-{name}-{}", std::process::id()))
            });
            std::fs::create_dir_all(&path)?;
            Ok(RunDir { path, temporary })
        }

        /// Ends the run with its result `r`: a temporary directory goes if `r` is `Ok`.
        pub fn finish<T>(self, r: Result<T, BoxError>) -> Result<T, BoxError> {
            if !self.temporary {
                return r;
            }
            if r.is_ok() {
                std::fs::remove_dir_all(&self.path)?;
                println!(
                    "(removed {}; give --out DIR to keep the logs)",
                    self.path.display()
                );
            } else {
                eprintln!("logs kept in {}", self.path.display());
            }
            r
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_temporary_directory_goes_on_success_and_stays_on_failure() {
            let ok = RunDir::new(None, "run-dir-test-ok").unwrap();
            let path = ok.path.clone();
            assert!(path.is_dir());
            std::fs::write(path.join("a.log"), "x").unwrap();
            assert_eq!(ok.finish(Ok::<_, BoxError>(7)).unwrap(), 7);
            assert!(!path.exists(), "removed after success");

            let failed = RunDir::new(None, "run-dir-test-failed").unwrap();
            let path = failed.path.clone();
            assert!(failed.finish(Err::<(), BoxError>("no".into())).is_err());
            assert!(path.is_dir(), "kept after a failure");
            std::fs::remove_dir_all(&path).unwrap();

            let out = std::env::temp_dir()
                .join(format!("spindle-run-dir-test-given-{}", std::process::id()));
            let kept = RunDir::new(Some(out.clone()), "unused").unwrap();
            kept.finish(Ok::<_, BoxError>(())).unwrap();
            assert!(out.is_dir(), "--out is the user's: kept");
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
}
