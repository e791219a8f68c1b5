//! Compiles the avionics data model (`idl/avionics.idl`) into `OUT_DIR/avionics.rs`, which
//! `src/lib.rs` includes as `spindle_topics::avionics`.

fn main() {
    let result = spindle_idl::Builder::new().compile(&["idl/avionics.idl"], &["idl"]);
    if let Err(e) = result {
        // The error already names file:line:col with a caret; fail the build with it.
        eprintln!("{e}");
        std::process::exit(1);
    }
}
