//! The libfabric backend (feature `libfabric`).
