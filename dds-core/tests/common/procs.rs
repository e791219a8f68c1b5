//! Helpers the multi-process DCPS tests share (`rejoin_processes.rs`,
//! `bootstrap_processes.rs`): the members' addresses, a child's configuration from them,
//! and a child (the test binary re-run as one `#[ignore]`d test) whose stdout lines come
//! through a channel.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;

use spindle_dds_core::{Contact, ParticipantConfig, Transport};

/// `id=127.0.0.1:port,…` for `ids`, each on a port free when asked (bound, then
/// released for the child to take).
pub fn loopback_members(ids: &[u32]) -> String {
    ids.iter()
        .map(|id| {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            format!("{id}=127.0.0.1:{port}")
        })
        .collect::<Vec<_>>()
        .join(",")
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
