//! Buffers of a region held in place for readers, which the peers' writes this process
//! applies must not touch ([`Region::watch_pins`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Region, Words};
use crate::{Error, Result};

/// Equal buffers of a region, one pin bit each, that writes applied for peers must not
/// touch while pinned ([`Region::watch_pins`]).
pub(super) struct PinnedBuffers {
    /// Bit `e` set: buffer `e` is held in place.
    pub(super) pins: Arc<AtomicU64>,
    pub(super) first: usize,
    pub(super) stride: usize,
    pub(super) count: usize,
    /// Per buffer: writes for peers being applied into it now.
    pub(super) applying: Box<[AtomicU64]>,
}

impl PinnedBuffers {
    /// The first and last buffer `offset..offset + len` reaches, if it reaches any.
    fn reached(&self, offset: usize, len: usize) -> Option<(usize, usize)> {
        let end_all = self.first + self.count * self.stride;
        let end = offset.saturating_add(len);
        if len == 0 || end <= self.first || offset >= end_all {
            return None;
        }
        let a = (offset.max(self.first) - self.first) / self.stride;
        let b = (end.min(end_all) - 1 - self.first) / self.stride;
        // Invariant: both lie among the watched buffers (clamped above).
        assert!(a <= b && b < self.count, "reached buffers are watched ones");
        Some((a, b))
    }
}

/// Most buffers [`Region::watch_pins`] watches: the bits of the pin word.
pub const PINNED_BUFFERS_MAX: usize = u64::BITS as usize;

impl Region {
    /// Makes the pins in `pins` guard `count` buffers of `stride` bytes from `first`:
    /// while bit `e` is set, a write applied for a peer (by this process's backend
    /// threads: tcp, the simulated fabric) that reaches buffer `e` is refused with
    /// [`Error::Pinned`] instead of landing under a reader of
    /// [`Region::guarded_slice`]. An owner sets a bit, then calls [`Region::settle_pin`]
    /// before it reads the buffer in place. Peers that write the memory directly (shm's
    /// mappings, RDMA devices) are not seen: for them the protocol is the only guard.
    /// Once per region; errors (never panics) on a second call or buffers past the end.
    pub fn watch_pins(
        &self,
        pins: Arc<AtomicU64>,
        first: usize,
        stride: usize,
        count: usize,
    ) -> Result<()> {
        if count == 0 || count > PINNED_BUFFERS_MAX || stride == 0 {
            return Err(Error::Config(format!(
                "region {}: {count} pinned buffers of {stride} bytes (1..={PINNED_BUFFERS_MAX} \
                 buffers of at least a byte)",
                self.id()
            )));
        }
        self.check_range(first, stride.saturating_mul(count))?;
        let watched = PinnedBuffers {
            pins,
            first,
            stride,
            count,
            applying: (0..count).map(|_| AtomicU64::new(0)).collect(),
        };
        self.inner.pinned.set(watched).map_err(|_| {
            Error::Config(format!(
                "region {}: its pins are watched already",
                self.id()
            ))
        })
    }

    /// Waits until no write for a peer is being applied into buffer `buffer` (one that
    /// entered before its pin was set; any later one is refused), so the owner may read
    /// it in place. Returns at once for an unwatched region.
    pub fn settle_pin(&self, buffer: usize) {
        let Some(p) = self.inner.pinned.get() else {
            return;
        };
        let Some(applying) = p.applying.get(buffer) else {
            return;
        };
        while applying.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }

    /// Enters the watched buffers `offset..offset + len` reaches, for a write applied for
    /// a peer: errs if one is pinned. Returns the buffers entered, for `exit_apply`.
    pub(super) fn enter_apply(&self, offset: usize, len: usize) -> Result<Option<(usize, usize)>> {
        let Some(p) = self.inner.pinned.get() else {
            return Ok(None);
        };
        let Some((a, b)) = p.reached(offset, len) else {
            return Ok(None);
        };
        for e in a..=b {
            p.applying[e].fetch_add(1, Ordering::SeqCst);
        }
        // Dekker with `settle_pin`: either this load sees the pin, or the pinner's
        // `settle_pin` sees the count above and waits for `exit_apply`.
        let mask = (a..=b).fold(0u64, |m, e| m | 1 << e);
        if p.pins.load(Ordering::SeqCst) & mask != 0 {
            self.exit_apply(Some((a, b)));
            return Err(Error::Pinned {
                region: self.id(),
                offset,
                len,
            });
        }
        Ok(Some((a, b)))
    }

    pub(super) fn exit_apply(&self, entered: Option<(usize, usize)>) {
        if let (Some((a, b)), Some(p)) = (entered, self.inner.pinned.get()) {
            for e in a..=b {
                p.applying[e].fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Bytes of a peer's write without its guard ([`Region::write_bytes`], or in bulk as
    /// [`Region::write_bytes_guarded`] when `guarded`: the head of a guarded frame, the
    /// simulated fabric's writes), refused into a pinned buffer as
    /// [`Region::apply_write`] refuses them.
    pub(crate) fn write_bytes_for_peer(
        &self,
        offset: usize,
        bytes: &[u8],
        guarded: bool,
    ) -> Result<()> {
        let entered = self.enter_apply(offset, bytes.len())?;
        let wrote = self.write_words(offset, bytes, Words::bulk(guarded));
        self.exit_apply(entered);
        wrote
    }

    /// True if `offset..offset + len` reaches a watched buffer ([`Region::watch_pins`]).
    pub(super) fn watches(&self, offset: usize, len: usize) -> bool {
        self.inner
            .pinned
            .get()
            .is_some_and(|p| p.reached(offset, len).is_some())
    }
}

/// Waits until `fd` has bytes to read (or its end, or an error), honouring the socket's
/// receive timeout (`SO_RCVTIMEO`) as a blocking `recv` would: `WouldBlock` once it
/// passes.
pub(super) fn wait_readable(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut tv_len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: `tv` and `tv_len` are valid for writes of a `timeval` and its length, as
    // getsockopt(SO_RCVTIMEO) needs.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&mut tv as *mut libc::timeval).cast(),
            &mut tv_len,
        )
    };
    let timeout_ms = if rc == 0 && (tv.tv_sec > 0 || tv.tv_usec > 0) {
        // `time_t` and `suseconds_t` are both 64-bit on the targets we build for.
        let ms = tv
            .tv_sec
            .saturating_mul(1000)
            .saturating_add((tv.tv_usec + 999) / 1000);
        ms.clamp(1, libc::c_int::MAX.into()) as libc::c_int
    } else {
        -1
    };
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid, writable `pollfd`.
    match unsafe { libc::poll(&mut p, 1, timeout_ms) } {
        n if n < 0 => Err(std::io::Error::last_os_error()),
        0 => Err(std::io::ErrorKind::WouldBlock.into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blocking `recv_into` a watched buffer waits for the bytes outside the entered
    /// section (a pin never waits on the network), takes them when they come, honours
    /// the socket's receive timeout, and refuses a pinned buffer without reading.
    #[test]
    fn a_blocking_receive_into_a_watched_buffer_waits_outside_and_honours_the_timeout() {
        use std::io::Write as _;
        use std::os::fd::AsRawFd as _;
        let r = Region::new_heap(1, 64 + 2 * 256).unwrap();
        let pins = Arc::new(AtomicU64::new(0));
        r.watch_pins(Arc::clone(&pins), 64, 256, 2).unwrap();
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            a.write_all(&[3; 16]).unwrap();
            a
        });
        assert_eq!(
            r.recv_into(fd, 64, 256, 0).unwrap(),
            16,
            "the bytes that came"
        );
        assert_eq!(r.to_vec(64, 16).unwrap(), vec![3; 16]);
        let mut a = writer.join().unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_millis(10)))
            .unwrap();
        let e = r.recv_into(fd, 64, 256, 0).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "the timeout: {e}");
        pins.fetch_or(0b10, Ordering::SeqCst);
        a.write_all(&[4; 8]).unwrap();
        let e = r.recv_into(fd, 64 + 256, 8, 0).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "pinned: {e}");
        assert_eq!(
            r.recv_into(fd, 64, 8, 0).unwrap(),
            8,
            "the unpinned one takes them"
        );
    }

    #[test]
    fn a_peer_write_into_a_pinned_buffer_is_refused_and_others_land() {
        let r = Region::new_heap(1, 64 + 3 * 256).unwrap();
        let pins = Arc::new(AtomicU64::new(0));
        assert!(
            r.watch_pins(Arc::clone(&pins), 64, 256, 0).is_err(),
            "no buffers"
        );
        assert!(
            r.watch_pins(Arc::clone(&pins), 64, 256, 4).is_err(),
            "past the end"
        );
        r.watch_pins(Arc::clone(&pins), 64, 256, 3).unwrap();
        assert!(r.watch_pins(Arc::clone(&pins), 64, 256, 3).is_err(), "once");
        pins.fetch_or(0b010, Ordering::SeqCst);
        r.settle_pin(1);
        // Into buffer 1, or across its edge from buffer 0: refused, nothing written.
        for (at, len) in [(64 + 256, 8), (64 + 250, 16), (64 + 2 * 256 - 8, 8)] {
            assert!(
                matches!(
                    r.apply_write(at, &vec![7; len], None),
                    Err(Error::Pinned { .. })
                ),
                "a write of {len} at {at}"
            );
        }
        assert!(r.to_vec(64 + 248, 16).unwrap().iter().all(|b| *b == 0));
        // The header, buffers 0 and 2, and buffer 1 once its pin is gone: written.
        for at in [0, 64, 64 + 2 * 256] {
            r.apply_write(at, &[9; 8], Some((at + 8, 1))).unwrap();
            assert_eq!(r.to_vec(at, 8).unwrap(), vec![9; 8]);
        }
        assert!(r.write_bytes_for_peer(64 + 300, &[1; 8], true).is_err());
        pins.fetch_and(!0b010, Ordering::SeqCst);
        r.apply_write(64 + 256, &[5; 8], None).unwrap();
        r.write_bytes_for_peer(64 + 300, &[1; 8], false).unwrap();
        assert_eq!(r.to_vec(64 + 256, 8).unwrap(), vec![5; 8]);
    }
}
