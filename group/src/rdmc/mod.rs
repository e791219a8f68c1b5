//! RDMC: large messages by block-pipelined multicast (the RDMC paper; Derecho §3.3, §3.6).

pub mod schedule;
