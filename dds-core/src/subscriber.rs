//! Subscribers (DDS `Subscriber`): they create and delete readers, each one a declared
//! interest that a view change carries.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use spindle_qos::{DataReaderQos, SubscriberQos};
use spindle_topics::TopicType;

use crate::common::lock;
use crate::error::{Error, Result};
use crate::inner::ParticipantInner;
use crate::reader::DataReader;
use crate::reader_core::ReaderCore;
use crate::shared::State;
use crate::topic::TopicDescription;

/// Creates readers (DDS `Subscriber`).
#[derive(Clone)]
pub struct Subscriber {
    pub(crate) participant: Arc<ParticipantInner>,
    pub(crate) qos: SubscriberQos,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("qos", &self.qos)
            .finish()
    }
}

impl Subscriber {
    /// The subscriber's QoS.
    pub fn qos(&self) -> &SubscriberQos {
        &self.qos
    }

    /// Creates a reader on `topic` (a [`Topic`](crate::Topic) or a
    /// [`ContentFilteredTopic`](crate::ContentFilteredTopic), whose filter the reader
    /// applies to every sample it receives) and waits until the view carries it: every
    /// sample written after this returns reaches it; on a store-level topic it also holds
    /// the stored history.
    pub fn create_datareader<D: TopicDescription>(
        &self,
        description: &D,
        qos: DataReaderQos,
    ) -> Result<DataReader<D::Sample>> {
        type T<D> = <D as TopicDescription>::Sample;
        let topic = description.topic();
        let p = &self.participant;
        let ident = &topic.inner.ident;
        let _span = tracing::info_span!(
            "create_datareader",
            node = p.me(),
            topic = %ident.name,
            subgroup = ident.subgroup
        )
        .entered();
        qos.check()?;
        // What a store keeps is the writers' history (TRANSIENT_LOCAL); a reader's own
        // HISTORY bounds only its cache.
        let (id, interest) = p.new_entity::<T<D>>(&topic.inner, qos.delivery_level(), true, 1)?;
        let sg = topic.inner.ident.subgroup;
        let core = ReaderCore::new(
            id,
            Arc::clone(&topic.inner.ident),
            qos,
            Arc::clone(&p.shared.clock),
            &self.qos,
            description.content_filter().cloned(),
        );
        if let Some(period) = core.deadline_us() {
            p.shared.want_timer(period);
        }
        {
            // Registered and primed from this node's store (if it already holds the
            // subgroup) under one lock, so no delivery is missed or seen twice.
            let mut st = lock(&p.shared.state);
            if let Some(store) = st.stores.get(&sg) {
                core.prime(store, &st.endpoints);
            }
            st.readers
                .entry(topic.inner.ident.topic_id)
                .or_default()
                .push(Arc::clone(&core));
        }
        p.add_interest(id, sg, interest);
        let me = p.me();
        let ready = |st: &State| {
            // Either this node reads the subgroup now, or no writer exists yet (the
            // reader matches when one comes).
            // On a store-level topic, the stored history has arrived too.
            st.subgroups
                .get(&sg)
                .is_none_or(|d| d.readers.contains(&me))
                && !st.awaiting_state.contains(&sg)
        };
        let endpoint = core.endpoint();
        if let Err(e) = p.redeclare(ready).and_then(|_| p.announce(endpoint, true)) {
            p.remove_interest(id);
            unregister_reader(p, &core);
            let _ = p.redeclare(|_| true);
            return Err(e);
        }
        let r = DataReader::new(core, Arc::clone(&topic.inner));
        r.refresh_matched();
        Ok(r)
    }

    /// Deletes a reader.
    pub fn delete_datareader<T: TopicType>(&self, reader: DataReader<T>) -> Result<()> {
        let p = &self.participant;
        let core = reader.core();
        if !p.remove_interest(core.id) {
            return Err(Error::AlreadyDeleted(format!("reader {}", core.id)));
        }
        core.deleted.store(true, Ordering::Release);
        unregister_reader(p, core);
        let endpoint = core.endpoint();
        p.announce(endpoint, false)?;
        p.redeclare(|_| true)
    }
}

fn unregister_reader(p: &ParticipantInner, core: &Arc<ReaderCore>) {
    let mut st = lock(&p.shared.state);
    if let Some(rs) = st.readers.get_mut(&core.topic.topic_id) {
        rs.retain(|r| !Arc::ptr_eq(r, core));
    }
    core.clear_listener();
}
