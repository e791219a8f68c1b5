//! The command line refuses a bad configuration with an error naming the file, the key
//! and the line, and exit status 2 — before it touches either network.

use std::process::Command;

#[test]
fn a_bad_config_exits_2_naming_the_key_and_line() {
    let dir = std::env::temp_dir().join(format!("spindle-bridge-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[rtps]\ndomain_id = 3\n\n[spindle]\nconfig = \"p.toml\"\n\n[[topic]]\nname = \"T\"\n\
         type_name = \"M::T\"\nkeyed = true\nkey = [\"string\"]\ndirecton = \"both\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle-rtps-bridge"))
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bad.toml") && err.contains("direction"),
        "{err}"
    );
    assert!(err.contains("line 12"), "{err}");
    // A missing Spindle participant file is named too.
    std::fs::write(
        &path,
        "[rtps]\ndomain_id = 3\n[spindle]\nconfig = \"missing.toml\"\n\n[[topic]]\n\
         name = \"T\"\ntype_name = \"M::T\"\nkeyed = false\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle-rtps-bridge"))
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("missing.toml"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
