//! `spindle bridge CONFIG.toml`, the RTPS bridge as a subcommand: it starts (a Spindle
//! participant and a RustDDS participant on loopback), prints READY, stops cleanly on
//! `stop` with its counters; a bad configuration exits 2 naming the key, before it
//! touches either network. Every wait is bounded; no timing is asserted.

mod common;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_spindle");
/// Bound on each wait for what the bridge prints.
const WAIT: Duration = Duration::from_secs(90);

/// Kills the child when the test ends, however it ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads `child`'s standard output in a thread; the returned function waits (up to
/// [`WAIT`]) for the next line `want` accepts, skipping others, and returns it.
fn lines(child: &mut Child) -> impl Fn(&str, &dyn Fn(&str) -> bool) -> String {
    let out = child.stdout.take().expect("stdout");
    let rx = common::line_channel(out);
    move |what: &str, want: &dyn Fn(&str) -> bool| loop {
        let l = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("never printed {what}"));
        if want(&l) {
            return l;
        }
    }
}

#[test]
fn bridge_starts_reports_ready_and_stops_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("participant.toml"),
        "node_id = 1\ntransport = \"tcp\"\nlisten = \"127.0.0.1:0\"\nbootstrap = [1]\n",
    )
    .expect("participant config");
    // An RTPS domain id of its own, so parallel runs of other bridges do not meet it.
    let domain = 100 + std::process::id() % 100;
    let bridge = dir.path().join("bridge.toml");
    std::fs::write(
        &bridge,
        format!(
            "[rtps]\ndomain_id = {domain}\nonly_networks = [\"127.0.0.1\"]\n\n[spindle]\n\
             config = \"participant.toml\"\n\n[[topic]]\nname = \"Telemetry\"\n\
             type_name = \"Interop::Reading\"\nkeyed = true\nkey = [\"string\"]\n\
             direction = \"both\"\n"
        ),
    )
    .expect("bridge config");
    let mut child = Guard(
        Command::new(BIN)
            .arg("bridge")
            .arg(&bridge)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start spindle bridge"),
    );
    let next = lines(&mut child.0);
    next("READY", &|l| l == "READY");
    let mut stdin = child.0.stdin.take().expect("stdin");
    writeln!(stdin, "stop").expect("ask to stop");
    let stats = next("STATS", &|l| l.starts_with("STATS "));
    assert!(
        stats.contains("into_spindle=0") && stats.contains("into_rtps=0"),
        "{stats}"
    );
    let status = child.0.wait().expect("wait");
    assert!(status.success(), "{status}");
}

#[test]
fn a_bad_bridge_config_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[rtps]\ndomain_id = 3\n\n[spindle]\nconfig = \"p.toml\"\n\n[[topic]]\nname = \"T\"\n\
         type_name = \"M::T\"\nkeyed = true\nkey = [\"string\"]\ndirecton = \"both\"\n",
    )
    .expect("write");
    let out = Command::new(BIN)
        .arg("bridge")
        .arg(&bad)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("spindle bridge: "), "{err}");
    assert!(
        err.contains("bad.toml") && err.contains("direction"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["bridge", "/nonexistent/bridge.toml"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

/// Ctrl-C (here SIGINT) stops the bridge as `stop` does — its counters, then it leaves
/// its Spindle domain — and exits 130. The other member of a domain of two goes on: a
/// bridge that vanished would cost it its majority.
#[test]
fn an_interrupted_bridge_leaves_its_domain_and_the_other_member_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let fabric = "[fabric]\nsuspect_floor_ms = 2000\nsuspect_ceiling_ms = 10000\n";
    std::fs::write(
        dir.path().join("participant.toml"),
        format!("node_id = 1\ntransport = \"tcp\"\nlisten = \"127.0.0.1:{port}\"\nbootstrap = [1]\n{fabric}"),
    )
    .expect("participant config");
    let member = dir.path().join("member.toml");
    std::fs::write(
        &member,
        format!("node_id = 2\ntransport = \"tcp\"\nlisten = \"127.0.0.1:0\"\n\n[[contacts]]\nnode = 1\naddress = \"127.0.0.1:{port}\"\n\n{fabric}"),
    )
    .expect("member config");
    let domain = 100 + (std::process::id() + 50) % 100;
    let bridge = dir.path().join("bridge.toml");
    std::fs::write(
        &bridge,
        format!(
            "[rtps]\ndomain_id = {domain}\nonly_networks = [\"127.0.0.1\"]\n\n[spindle]\n\
             config = \"participant.toml\"\n\n[[topic]]\nname = \"Telemetry\"\n\
             type_name = \"Interop::Reading\"\nkeyed = true\nkey = [\"string\"]\n"
        ),
    )
    .expect("bridge config");
    let mut b = Guard(
        Command::new(BIN)
            .arg("bridge")
            .arg(&bridge)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start spindle bridge"),
    );
    let bridge_says = lines(&mut b.0);
    bridge_says("READY", &|l| l == "READY");
    let idl = concat!(env!("CARGO_MANIFEST_DIR"), "/../topics/idl/avionics.idl");
    let mut sub = Guard(
        Command::new(BIN)
            .args(["sub", "--config"])
            .arg(&member)
            .args([
                "--idl",
                idl,
                "-t",
                "Avionics::AirData",
                "--topic",
                "AirData",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start sub"),
    );
    let sub_says = lines(&mut sub.0);
    sub_says("the view of both", &|l| l.contains("\"members\":[1,2]"));
    let kill = |child: &Child, signal: &str| {
        let s = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(s.success(), "kill {signal}");
    };
    kill(&b.0, "-INT");
    bridge_says("STATS", &|l| l.starts_with("STATS "));
    let status = b.0.wait().expect("wait for the bridge");
    assert_eq!(status.code(), Some(130), "{status}");
    // The member left sees a view without the bridge, and is still running.
    sub_says("the view without the bridge", &|l| {
        l.contains("\"members\":[2]")
    });
    assert!(
        sub.0.try_wait().expect("try_wait").is_none(),
        "the member shut down"
    );
    kill(&sub.0, "-TERM");
    assert_eq!(sub.0.wait().expect("wait for sub").code(), Some(130));
}
