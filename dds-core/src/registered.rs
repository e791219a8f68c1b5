//! The instances a writer registered (DDS "registered"), kept with its write path held:
//! for `lookup_instance` and `get_key_value`, for RESOURCE_LIMITS `max_instances` at the
//! writer, for the handle forms of `dispose` and `unregister_instance`, and for its
//! deletion to unregister them.
//!
//! An instance is registered by `register_instance`, or by the first `write` or
//! `dispose` of it (implicitly, as DDS says), and stays so until the writer unregisters
//! it. Registration happens with the write path held, **before** the sample is numbered,
//! so `max_instances` is never passed, also when several threads share the writer; a
//! sample that then fails to go (a `Timeout`) leaves its instance registered, as a
//! registration on its own would.
//!
//! A run of samples of one instance costs one comparison; a new instance costs a map
//! insertion and, for its key, one encoding of the sample at most
//! [`crate::cache::KEY_SAMPLE_BYTES_MAX`] long (a reader keeps its key the same way).

use std::collections::BTreeMap;

use crate::cache::KEY_SAMPLE_BYTES_MAX;
use crate::error::{Error, Result};
use crate::sample::{InstanceHandle, SampleKind};

/// Most instances a writer keeps track of when RESOURCE_LIMITS `max_instances` does not
/// bound them lower: past it, new instances are written but not registered (deleting the
/// writer does not unregister them, `lookup_instance` does not find them), and a warning
/// says so once.
pub const REGISTERED_INSTANCES_MAX: usize = 1 << 20;

/// Most bytes of keys a writer keeps for `get_key_value`, all its instances together:
/// past it, a new instance's key is not kept (`get_key_value` says so). Bounds the keys
/// at 64 MiB per writer whatever the instance count.
pub const REGISTERED_KEY_BYTES_MAX: usize = 64 << 20;

/// One registered instance.
#[derive(Debug)]
struct Kept {
    /// The encoding of the sample it was registered with (its key members are the
    /// instance's), if at most [`KEY_SAMPLE_BYTES_MAX`] long and within
    /// [`REGISTERED_KEY_BYTES_MAX`].
    key: Option<Box<[u8]>>,
    /// Whether a sample of it went (an instance only registered has nothing for its
    /// readers to end).
    written: bool,
}

/// Why [`Registered::key_sample`] has no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoKey {
    /// The writer has not registered the instance (or unregistered it).
    NotRegistered,
    /// Registered, but its key was not kept (too long, or past the key budget).
    NotKept,
}

/// The instances a writer registered. See the module docs.
#[derive(Debug)]
pub(crate) struct Registered {
    /// The instance of the writer's last sample that went, registered and written: a
    /// run of samples of it skips the map.
    last: Option<InstanceHandle>,
    kept: BTreeMap<InstanceHandle, Kept>,
    /// RESOURCE_LIMITS `max_instances` (`usize::MAX`: unlimited).
    max_instances: usize,
    /// The bytes of `kept`'s keys, at most [`REGISTERED_KEY_BYTES_MAX`].
    key_bytes: usize,
    warned: bool,
}

impl Registered {
    /// No instances yet; at most `max_instances` (RESOURCE_LIMITS, negative: unlimited).
    pub(crate) fn new(max_instances: i32) -> Registered {
        Registered {
            last: None,
            kept: BTreeMap::new(),
            max_instances: usize::try_from(max_instances).unwrap_or(usize::MAX),
            key_bytes: 0,
            warned: false,
        }
    }

    /// Before a sample of `kind` for instance `key` is numbered: a data sample or a
    /// dispose registers its instance if it is not yet, keeping the key that `encode`
    /// writes into the buffer it is given (`encode` returns the length, or `None` when
    /// it does not fit). `OutOfResources` when registering it would pass
    /// `max_instances`; nothing is then sent.
    pub(crate) fn admit(
        &mut self,
        key: InstanceHandle,
        kind: SampleKind,
        topic: &str,
        encode: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> Result<()> {
        if self.last == Some(key) || !matches!(kind, SampleKind::Data | SampleKind::Dispose) {
            return Ok(());
        }
        self.register(key, topic, encode)
    }

    /// Registers instance `key` if it is not yet (DDS `register_instance`; see
    /// [`Registered::admit`]).
    pub(crate) fn register(
        &mut self,
        key: InstanceHandle,
        topic: &str,
        encode: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> Result<()> {
        if let Some(k) = self.kept.get(&key) {
            if k.written {
                // Writes alternating among instances pay this one lookup each.
                self.last = Some(key);
            }
            return Ok(());
        }
        if self.kept.len() >= self.max_instances {
            return Err(Error::OutOfResources(format!(
                "a writer of topic {topic:?} registered its RESOURCE_LIMITS max_instances = \
                 {} instances: unregister one before writing another",
                self.max_instances
            )));
        }
        if self.kept.len() >= REGISTERED_INSTANCES_MAX {
            if !self.warned {
                self.warned = true;
                tracing::warn!(
                    topic,
                    "a writer registered more than REGISTERED_INSTANCES_MAX = \
                     {REGISTERED_INSTANCES_MAX} instances: the later ones are written but \
                     not tracked (its deletion does not unregister them)"
                );
            }
            return Ok(());
        }
        let room = KEY_SAMPLE_BYTES_MAX.min(REGISTERED_KEY_BYTES_MAX - self.key_bytes);
        let mut buf = [0u8; KEY_SAMPLE_BYTES_MAX];
        let key_sample = encode(&mut buf[..room]).map(|n| Box::<[u8]>::from(&buf[..n]));
        self.key_bytes += key_sample.as_ref().map_or(0, |k| k.len());
        // The budget: each key fits what was left of it.
        assert!(self.key_bytes <= REGISTERED_KEY_BYTES_MAX);
        self.kept.insert(
            key,
            Kept {
                key: key_sample,
                written: false,
            },
        );
        Ok(())
    }

    /// A sample of `kind` for instance `key` went: a data sample or a dispose marks it
    /// written; an unregister forgets it.
    pub(crate) fn wrote(&mut self, key: InstanceHandle, kind: SampleKind) {
        match kind {
            SampleKind::Data | SampleKind::Dispose if self.last != Some(key) => {
                if let Some(k) = self.kept.get_mut(&key) {
                    k.written = true;
                    self.last = Some(key);
                }
            }
            SampleKind::Unregister => {
                if let Some(k) = self.kept.remove(&key) {
                    self.key_bytes -= k.key.map_or(0, |b| b.len());
                }
                if self.last == Some(key) {
                    self.last = None;
                }
            }
            _ => {}
        }
    }

    /// Whether instance `key` is registered.
    pub(crate) fn contains(&self, key: InstanceHandle) -> bool {
        self.kept.contains_key(&key)
    }

    /// The encoding of the sample instance `key` was registered with, from which its
    /// key decodes (DDS `get_key_value`).
    pub(crate) fn key_sample(&self, key: InstanceHandle) -> std::result::Result<&[u8], NoKey> {
        let k = self.kept.get(&key).ok_or(NoKey::NotRegistered)?;
        k.key.as_deref().ok_or(NoKey::NotKept)
    }

    /// The instances a sample of which went, in handle order, for the writer's deletion
    /// to unregister; none are kept after.
    pub(crate) fn take_written(&mut self) -> Vec<InstanceHandle> {
        self.last = None;
        self.key_bytes = 0;
        std::mem::take(&mut self.kept)
            .into_iter()
            .filter_map(|(h, k)| k.written.then_some(h))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u8) -> InstanceHandle {
        InstanceHandle(spindle_topics::KeyHash([n; 16]))
    }

    fn enc(bytes: &'static [u8]) -> impl FnOnce(&mut [u8]) -> Option<usize> {
        move |buf: &mut [u8]| {
            let dst = buf.get_mut(..bytes.len())?;
            dst.copy_from_slice(bytes);
            Some(bytes.len())
        }
    }

    #[test]
    fn max_instances_refuses_a_new_instance_before_it_is_sent_and_an_unregister_frees_room() {
        let mut r = Registered::new(2);
        r.admit(h(1), SampleKind::Data, "t", enc(b"one")).unwrap();
        r.wrote(h(1), SampleKind::Data);
        r.admit(h(2), SampleKind::Dispose, "t", enc(b"two"))
            .unwrap();
        r.wrote(h(2), SampleKind::Dispose);
        // Known instances and samples that register nothing still pass.
        r.admit(h(1), SampleKind::Data, "t", enc(b"one")).unwrap();
        r.admit(h(3), SampleKind::Unregister, "t", enc(b"x"))
            .unwrap();
        let e = r
            .admit(h(3), SampleKind::Data, "t", enc(b"three"))
            .unwrap_err();
        assert!(
            matches!(&e, Error::OutOfResources(m) if m.contains("max_instances = 2")),
            "{e}"
        );
        assert!(!r.contains(h(3)));
        r.wrote(h(1), SampleKind::Unregister);
        assert_eq!(r.key_sample(h(1)), Err(NoKey::NotRegistered));
        r.admit(h(3), SampleKind::Data, "t", enc(b"three")).unwrap();
        assert_eq!(r.key_sample(h(3)), Ok(&b"three"[..]));
    }

    #[test]
    fn only_written_instances_are_unregistered_at_deletion() {
        let mut r = Registered::new(-1);
        r.register(h(1), "t", enc(b"one")).unwrap();
        r.admit(h(2), SampleKind::Data, "t", enc(b"two")).unwrap();
        r.wrote(h(2), SampleKind::Data);
        // Registered, then written: the fast path's `last` must not skip the mark.
        r.admit(h(1), SampleKind::Data, "t", enc(b"one")).unwrap();
        r.wrote(h(1), SampleKind::Data);
        r.register(h(3), "t", enc(b"three")).unwrap();
        assert_eq!(r.take_written(), vec![h(1), h(2)]);
        assert!(!r.contains(h(3)));
    }

    #[test]
    fn a_key_too_long_to_keep_leaves_the_instance_registered_without_it() {
        let mut r = Registered::new(-1);
        r.register(h(1), "t", |_| None).unwrap();
        assert!(r.contains(h(1)));
        assert_eq!(r.key_sample(h(1)), Err(NoKey::NotKept));
        // The budget counts kept keys only, and an unregister gives theirs back.
        r.register(h(2), "t", enc(b"two")).unwrap();
        assert_eq!(r.key_bytes, 3);
        r.wrote(h(2), SampleKind::Unregister);
        assert_eq!(r.key_bytes, 0);
    }
}
