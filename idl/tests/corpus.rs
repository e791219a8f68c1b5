//! The IDL corpus: every valid file generates exactly its golden `.rs`, every invalid file
//! fails with exactly its `.err` text. `UPDATE_GOLDEN=1 cargo test -p spindle-idl --test corpus`
//! rewrites the golden files (review the diff!).

use std::path::{Path, PathBuf};

fn update() -> bool {
    std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1")
}

fn idl_files(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "idl"))
        .collect();
    v.sort();
    v
}

/// Compares `actual` with the golden file (or rewrites it); returns a mismatch message.
fn golden(path: &Path, actual: &str) -> Option<String> {
    if update() {
        std::fs::write(path, actual).expect("write golden");
        return None;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    (expected != actual).then(|| {
        format!(
            "{} differs from the generated output (UPDATE_GOLDEN=1 rewrites it):\n--- expected\n{expected}\n--- actual\n{actual}",
            path.display()
        )
    })
}

#[test]
fn valid_files_generate_their_golden_output() {
    let mut failures = Vec::new();
    let files = idl_files("tests/corpus/valid");
    assert!(files.len() >= 2, "the valid corpus is missing");
    for idl in files {
        match spindle_idl::generate_file(&idl, &["tests/corpus/valid"]) {
            Ok(g) => failures.extend(golden(&idl.with_extension("rs"), &g.code)),
            Err(e) => failures.push(format!("{}: unexpected error:\n{e}", idl.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_avionics_model_generates_its_golden_output() {
    let g = spindle_idl::generate_file(Path::new("../topics/idl/avionics.idl"), &[] as &[&str])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.file_name, "avionics.rs");
    if let Some(m) = golden(Path::new("tests/corpus/external/avionics.rs"), &g.code) {
        panic!("{m}");
    }
}

#[test]
fn invalid_files_fail_with_their_expected_error() {
    let mut failures = Vec::new();
    let files = idl_files("tests/corpus/invalid");
    assert!(files.len() >= 100, "the invalid corpus is missing");
    for idl in files {
        match spindle_idl::generate_file(&idl, &["tests/corpus/valid"]) {
            Ok(_) => failures.push(format!("{}: compiled, but should fail", idl.display())),
            Err(e) => {
                let text = format!("{e}\n");
                // Every error names the file, a line and a column, and draws a caret.
                let d = e.diagnostic().expect("a source diagnostic");
                assert!(d.line >= 1 && d.col >= 1, "{text}");
                assert!(
                    text.starts_with(&format!("{}:{}:{}: error: ", idl.display(), d.line, d.col)),
                    "{text}"
                );
                assert!(text.trim_end().ends_with('^'), "{text}");
                failures.extend(golden(&idl.with_extension("err"), &text));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn errors_from_included_files_name_the_included_file() {
    let dir = std::env::temp_dir().join(format!("spindle-idl-inc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(
        dir.join("bad.idl"),
        "module M {\n  struct S { long x };\n};\n",
    )
    .expect("write");
    std::fs::write(dir.join("top.idl"), "#include \"bad.idl\"\n").expect("write");
    let err = spindle_idl::generate_file(&dir.join("top.idl"), &[] as &[&str]).unwrap_err();
    let d = err.diagnostic().expect("diagnostic");
    assert!(d.file.ends_with("bad.idl"), "{err}");
    assert_eq!((d.line, d.col), (2, 21), "{err}");
    assert_eq!(d.source_line, "  struct S { long x };");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn include_cycles_are_read_once() {
    let dir = std::env::temp_dir().join(format!("spindle-idl-cycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(
        dir.join("a.idl"),
        "#include \"b.idl\"\nstruct A { long x; };\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("b.idl"),
        "#include \"a.idl\"\nstruct B { long y; };\n",
    )
    .expect("write");
    let g = spindle_idl::generate_file(&dir.join("a.idl"), &[] as &[&str])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.code.matches("pub struct A ").count(), 1);
    assert_eq!(g.code.matches("pub struct B ").count(), 1);
    assert_eq!(g.inputs.len(), 2);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn missing_input_file_is_an_error() {
    let err = spindle_idl::generate_file(Path::new("tests/corpus/no_such.idl"), &[] as &[&str])
        .unwrap_err();
    assert!(matches!(err, spindle_idl::Error::NotFound { .. }), "{err}");
}

/// Inputs that are no IDL text, and outputs that cannot be written as asked, are
/// errors that say which and where: a directory, bytes that are not UTF-8 (line and
/// column of the first), an output "directory" that is a file, and two inputs whose
/// generated files would have one name.
#[test]
fn unusable_inputs_and_outputs_say_what_is_wrong() {
    let dir = std::env::temp_dir().join(format!("spindle-idl-bad-io-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).expect("temp dir");
    let none = &[] as &[&str];
    let err = spindle_idl::generate_file(&dir, none)
        .unwrap_err()
        .to_string();
    assert!(err.contains("a directory, not an IDL file"), "{err}");
    std::fs::write(dir.join("latin1.idl"), b"struct S {\n  long caf\xe9; };\n").expect("write");
    let err = spindle_idl::generate_file(&dir.join("latin1.idl"), none)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("latin1.idl: line 2, column 11: not UTF-8 text (byte 21 is 0xe9)"),
        "{err}"
    );
    let text = "struct S { long x; };\n";
    std::fs::write(dir.join("kinds.idl"), text).expect("write");
    std::fs::write(dir.join("sub").join("kinds.idl"), text).expect("write");
    let out = dir.join("out");
    let err = spindle_idl::Builder::new()
        .out_dir(&out)
        .compile(
            &[dir.join("kinds.idl"), dir.join("sub").join("kinds.idl")],
            none,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("compiles to kinds.rs, as"), "{err}");
    let err = spindle_idl::Builder::new()
        .out_dir(dir.join("kinds.idl"))
        .compile(&[dir.join("kinds.idl")], none)
        .unwrap_err()
        .to_string();
    assert!(err.contains("exists and is not a directory"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn builder_writes_one_file_per_idl_file() {
    if update() {
        return; // the golden files are being rewritten concurrently
    }
    let out = std::env::temp_dir().join(format!("spindle-idl-out-{}", std::process::id()));
    spindle_idl::Builder::new()
        .out_dir(&out)
        .emit_rerun_if_changed(false)
        .compile(
            &[
                "tests/corpus/valid/everything.idl",
                "../topics/idl/avionics.idl",
            ],
            &["tests/corpus/valid"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let everything = std::fs::read_to_string(out.join("everything.rs")).expect("everything.rs");
    assert_eq!(
        everything,
        std::fs::read_to_string("tests/corpus/valid/everything.rs").expect("golden")
    );
    assert!(out.join("avionics.rs").is_file());
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn builder_without_out_dir_is_an_error() {
    if std::env::var_os("OUT_DIR").is_some() {
        return; // only meaningful outside a build script
    }
    let err = spindle_idl::Builder::new()
        .compile(&["x.idl"], &[] as &[&str])
        .unwrap_err();
    assert!(matches!(err, spindle_idl::Error::NoOutDir), "{err}");
}

#[test]
fn spindle_idlc_compiles_the_avionics_model() {
    if update() {
        return; // the golden files are being rewritten concurrently
    }
    let out = std::env::temp_dir().join(format!("spindle-idlc-ok-{}", std::process::id()));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_spindle-idlc"))
        .args(["../topics/idl/avionics.idl", "--out"])
        .arg(&out)
        .status()
        .expect("run spindle-idlc");
    assert!(status.success());
    let code = std::fs::read_to_string(out.join("avionics.rs")).expect("avionics.rs");
    assert_eq!(
        code,
        std::fs::read_to_string("tests/corpus/external/avionics.rs").expect("golden")
    );
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn spindle_idlc_reports_a_bad_file_with_a_caret_and_exit_code_1() {
    let out = std::env::temp_dir().join(format!("spindle-idlc-bad-{}", std::process::id()));
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_spindle-idlc"))
        .args(["tests/corpus/invalid/member_missing_semicolon.idl", "--out"])
        .arg(&out)
        .output()
        .expect("run spindle-idlc");
    assert_eq!(o.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        stderr,
        "tests/corpus/invalid/member_missing_semicolon.idl:1:19: error: expected `;` after the member declaration, found `}`\n\
         struct S { long x };\n                  ^\n"
    );
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn includes_nested_too_deeply_are_an_error() {
    let dir = std::env::temp_dir().join(format!("spindle-idl-deep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for i in 0..100 {
        std::fs::write(
            dir.join(format!("f{i}.idl")),
            format!("#include \"f{}.idl\"\n", i + 1),
        )
        .expect("write");
    }
    let err = spindle_idl::generate_file(&dir.join("f0.idl"), &[] as &[&str]).unwrap_err();
    assert!(
        err.to_string().contains("includes are nested too deeply"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
