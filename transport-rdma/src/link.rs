//! Stream links shared by the tcp and shm backends: framing, handshake, probes.
