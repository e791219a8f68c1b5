//! # spindle-examples — runnable applications
//!
//! This crate will hold end-to-end applications on the DCPS API, among them the avionics
//! demo domain that is the README's main job once the DCPS layer lands (issue 7).
#![deny(missing_docs)]
