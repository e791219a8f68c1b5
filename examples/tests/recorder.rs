//! The flight-data recorder as a test (`avionics recorder`): three processes write a
//! PERSISTENT topic, all are SIGKILLed at once, restart from their data directories over
//! the network, and read every acknowledged event back; over tcp, then shm.

use std::process::Command;

/// The flight-data recorder (`avionics recorder`): three processes write a PERSISTENT
/// topic, all are SIGKILLed at once, restarted from their data directories (the restart
/// protocol), and every event acknowledged before the kill is read back by every one.
fn recorder(transport: &str) {
    let dir = std::env::temp_dir().join(format!(
        "spindle-recorder-test-{transport}-{}",
        std::process::id()
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_avionics"))
        .args([
            "recorder",
            "--transport",
            transport,
            "--seconds",
            "1",
            "--out",
        ])
        .arg(&dir)
        .output()
        .expect("run avionics recorder");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "avionics recorder over {transport} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The driver checked read-back ≥ acknowledged; check here that something was.
    let acked = stdout
        .lines()
        .find(|l| l.contains("SIGKILL all"))
        .unwrap_or_else(|| panic!("no kill line:\n{stdout}"));
    assert!(
        acked.contains("\"fdr1\": ") && !acked.contains("\"fdr1\": 0"),
        "{acked}"
    );
    assert_eq!(stdout.matches(" restarted (view ").count(), 3, "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One test, tcp then shm: run beside each other (and beside the 7-process avionics
/// tests, which live in another test binary for that reason) the processes of a loaded
/// 2-core machine starve long enough to be suspected.
#[test]
fn the_recorder_domain_killed_whole_reads_every_durable_event_back() {
    recorder("tcp");
    recorder("shm");
}
