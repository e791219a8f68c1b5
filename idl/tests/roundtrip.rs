//! Round trips of generated types: encode → decode → equal, for every generated type.

#[allow(dead_code)]
mod gen_everything {
    include!("corpus/valid/everything.rs");
}

#[allow(dead_code)]
mod gen_avionics {
    include!("corpus/external/avionics.rs");
}
