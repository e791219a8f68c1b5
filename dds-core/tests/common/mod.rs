//! Helpers the DCPS tests share (real tcp in `dcps.rs`, simulation in `sim_dcps.rs` and
//! `sim_qos.rs`, whose own helpers are in [`sim`]).

#![allow(dead_code)]

pub mod procs;
pub mod sim;

use spindle_dds_core::Sample;
use spindle_qos::{DataReaderQos, History, Reliability, TopicQos};
use spindle_topics::KeyedString;

/// RELIABLE + VOLATILE: the Atomic level.
pub fn atomic() -> TopicQos {
    TopicQos::default().with_reliability(Reliability::reliable())
}

/// A reader of `qos`'s level that keeps every sample.
pub fn keep_all(qos: &TopicQos) -> DataReaderQos {
    DataReaderQos::from_topic_qos(qos).with_history(History::keep_all())
}

/// A sample of key `key`.
pub fn ks(key: &str, value: impl Into<String>) -> KeyedString {
    KeyedString {
        key: key.into(),
        value: value.into(),
    }
}

/// `(view, order index, value)`: each sample's place in the total order.
pub fn order(s: &[Sample<KeyedString>]) -> Vec<(u32, u64, String)> {
    s.iter()
        .map(|s| {
            (
                s.info.view_id,
                s.info.order_index,
                s.data.as_ref().map_or(String::new(), |d| d.value.clone()),
            )
        })
        .collect()
}
