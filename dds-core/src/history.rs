//! Reads over history on a PERSISTENT (LoggedStore) reader: the samples of its topic that
//! this participant's log of the topic's subgroup holds ([`crate::logged`]), by version,
//! as of a time (Derecho's temporal query), or over a range of versions. They read the log
//! files directly ([`spindle_log::read_entries`]: whole, checked entries; the predicate
//! thread keeps appending meanwhile), not the reader's cache, and leave the cache alone.
//! What retention removed is gone from them too.

use std::collections::BTreeMap;
use std::ops::RangeBounds;

use spindle_log::{Entry, Version};
use spindle_qos::DeliveryLevel;
use spindle_topics::TopicType;

use crate::common::lock;
use crate::error::{Error, Result};
use crate::reader::DataReader;
use crate::sample::{
    InstanceHandle, InstanceState, Sample, SampleHeader, SampleInfo, SampleKind, SampleState,
    ViewState,
};

impl<T: TopicType> DataReader<T> {
    /// The entries of this reader's subgroup log in `range`, only its topic's samples.
    fn history(&self, range: impl RangeBounds<Version>) -> Result<Vec<(SampleHeader, Entry)>> {
        if self.core.level != DeliveryLevel::LoggedStore {
            return Err(Error::PreconditionNotMet(format!(
                "reader {} of {:?} requests {}: reads over history need a PERSISTENT \
                 (LoggedStore) reader",
                self.core.id, self.core.topic.name, self.core.level
            )));
        }
        let config = &self.topic.participant.config;
        let Some(p) = crate::logged::persistence(config) else {
            return Err(Error::PreconditionNotMet(
                "reads over history need the participant's data_dir".into(),
            ));
        };
        let dir = p.subgroup_dir(self.core.subgroup);
        let entries = spindle_log::read_entries(&dir, range)
            .map_err(|e| Error::Error(format!("reading the log {}: {e}", dir.display())))?;
        Ok(entries
            .into_iter()
            .filter_map(|e| {
                let (h, _) = SampleHeader::decode(&e.payload).ok()?;
                (h.topic_id == self.core.topic.topic_id && h.level >= self.core.level)
                    .then_some((h, e))
            })
            .collect())
    }

    /// One logged sample as a history read returns it: read, not new; the instance state
    /// the sample itself says (disposed, unregistered, or alive).
    fn sample_of(&self, h: &SampleHeader, e: &Entry, durable: bool) -> Result<Sample<T>> {
        let body = &e.payload[crate::sample::SAMPLE_HEADER_BYTES..];
        let valid = h.kind == SampleKind::Data;
        let data = if valid { Some(T::decode(body)?) } else { None };
        Ok(Sample {
            data,
            info: SampleInfo {
                sample_state: SampleState::Read,
                view_state: ViewState::NotNew,
                instance_state: match h.kind {
                    SampleKind::Dispose => InstanceState::NotAliveDisposed,
                    SampleKind::Unregister => InstanceState::NotAliveNoWriters,
                    // Control messages are not logged (`logged::is_logged`).
                    SampleKind::Data
                    | SampleKind::Liveliness
                    | SampleKind::CoherentEnd
                    | SampleKind::GroupCoherentEnd => InstanceState::Alive,
                },
                source_timestamp_ns: h.source_timestamp_ns,
                instance_handle: InstanceHandle(h.key_hash),
                publication_handle: h.writer(u32::try_from(e.meta.writer).unwrap_or(u32::MAX)),
                disposed_generation_count: 0,
                no_writers_generation_count: 0,
                valid_data: valid,
                view_id: u32::try_from(e.meta.version.view_id).unwrap_or(u32::MAX),
                order_index: e.meta.version.order_index,
                writer_seq: h.writer_seq,
                durable,
            },
        })
    }

    /// Decodes `entries` into samples, each marked durable as the participant knows it.
    fn samples_of(&self, entries: &[(SampleHeader, Entry)]) -> Result<Vec<Sample<T>>> {
        let durable = lock(&self.topic.participant.shared.state)
            .durable
            .get(&self.core.subgroup)
            .cloned()
            .unwrap_or_default();
        entries
            .iter()
            .map(|(h, e)| {
                let v = e.meta.version;
                let d =
                    u32::try_from(v.view_id).is_ok_and(|vid| durable.covers(vid, v.order_index));
                self.sample_of(h, e, d)
            })
            .collect()
    }

    /// The sample of this topic logged at version `(view_id, order_index)` (its
    /// `SampleInfo`'s), if the log holds it. `PreconditionNotMet` on a reader that is not
    /// PERSISTENT or a participant without a `data_dir`.
    pub fn read_version(&self, view_id: u32, order_index: u64) -> Result<Option<Sample<T>>> {
        let v = Version::new(u64::from(view_id), order_index);
        let found = self.history(v..=v)?;
        Ok(self.samples_of(&found)?.into_iter().next())
    }

    /// The topic's samples logged between two versions (inclusive bounds, as
    /// `(view_id, order_index)`), in the total order: a range over history.
    pub fn read_range(
        &self,
        range: impl RangeBounds<(u32, u64)>,
    ) -> Result<std::vec::IntoIter<Sample<T>>> {
        use std::ops::Bound;
        let map = |b: Bound<&(u32, u64)>| match b {
            Bound::Included((v, i)) => Bound::Included(Version::new(u64::from(*v), *i)),
            Bound::Excluded((v, i)) => Bound::Excluded(Version::new(u64::from(*v), *i)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let found = self.history((map(range.start_bound()), map(range.end_bound())))?;
        Ok(self.samples_of(&found)?.into_iter())
    }

    /// The state of the topic as of `time_ns` (ns since the Unix epoch; Derecho's temporal
    /// query): per instance, the last sample logged whose source timestamp is at or
    /// before it (a dispose or unregister notice if that came last), in the total order.
    pub fn read_at(&self, time_ns: i64) -> Result<Vec<Sample<T>>> {
        let all = self.history(..)?;
        let mut last: BTreeMap<InstanceHandle, usize> = BTreeMap::new();
        for (i, (h, _)) in all.iter().enumerate() {
            if h.source_timestamp_ns <= time_ns {
                last.insert(InstanceHandle(h.key_hash), i);
            }
        }
        let mut picked: Vec<usize> = last.into_values().collect();
        picked.sort_unstable();
        let chosen: Vec<(SampleHeader, Entry)> =
            picked.into_iter().map(|i| all[i].clone()).collect();
        self.samples_of(&chosen)
    }
}
