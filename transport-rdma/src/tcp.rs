//! The tcp backend: one-sided writes emulated over one stream per peer.
