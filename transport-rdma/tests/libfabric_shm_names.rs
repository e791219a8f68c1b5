//! libfabric's shm provider keeps each endpoint in a shared-memory file named after the
//! endpoint. A SIGKILLed process leaves its file behind; when its pid is reused, a new
//! endpoint that took the same name found the file "in use" (by a live process: itself)
//! and failed to open with EBUSY. This is what made a CI run's cross-process conformance
//! test fail ("the peer process never connected").
//!
//! Its own test binary: it plants files under this process's pid, which no other test of
//! this process may be opening endpoints beside.
#![cfg(feature = "libfabric")]

use std::collections::BTreeSet;
use std::path::Path;

use spindle_transport_rdma::{conformance, open_backend};

fn shm_files() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// libfabric 1.17's default shm endpoint name: `<pid>:<uid>:<endpoint index>`.
fn default_name(index: u32) -> String {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    format!("{}:{uid}:{index}", std::process::id())
}

#[test]
fn a_stale_shm_file_under_a_reused_pid_does_not_stop_an_endpoint_opening() {
    if !Path::new("/dev/shm").is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let before = shm_files();
    let live = open_backend("libfabric-shm", 1, conformance::contract_config())
        .unwrap_or_else(|e| panic!("opening the first libfabric-shm endpoint: {e}"));
    let pid = std::process::id().to_string();
    let own: Vec<String> = shm_files()
        .difference(&before)
        .filter(|name| name.contains(&pid))
        .cloned()
        .collect();
    assert_eq!(
        own.len(),
        1,
        "expected one new shm file of this process, found {own:?}"
    );
    // The files a SIGKILLed process of this pid would have left: each claims to belong to
    // a live process (this one), as after pid reuse.
    let mut planted = Vec::new();
    for index in 0..8 {
        let name = default_name(index);
        let path = Path::new("/dev/shm").join(&name);
        if !path.exists() {
            std::fs::hard_link(Path::new("/dev/shm").join(&own[0]), &path)
                .unwrap_or_else(|e| panic!("planting {}: {e}", path.display()));
            planted.push(path);
        }
    }
    let opened = open_backend("libfabric-shm", 2, conformance::contract_config());
    for path in &planted {
        let _ = std::fs::remove_file(path);
    }
    let second = opened.unwrap_or_else(|e| {
        panic!("a stale shm file named after this pid stopped a new endpoint opening: {e}")
    });
    second.close();
    live.close();
}
