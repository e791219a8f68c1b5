//! Topics (DDS `Topic`): a name, a type and a QoS, carried by one subgroup.

use std::marker::PhantomData;
use std::sync::Arc;

use spindle_group::SubgroupId;
use spindle_qos::TopicQos;
use spindle_topics::TopicType;

use crate::inner::TopicInner;

/// A topic of type `T` (DDS `Topic`). Cheap to clone.
pub struct Topic<T: TopicType> {
    pub(crate) inner: Arc<TopicInner>,
    _t: PhantomData<fn() -> T>,
}

impl<T: TopicType> Topic<T> {
    pub(crate) fn new(inner: Arc<TopicInner>) -> Topic<T> {
        Topic {
            inner,
            _t: PhantomData,
        }
    }
}

impl<T: TopicType> Clone for Topic<T> {
    fn clone(&self) -> Self {
        Topic {
            inner: Arc::clone(&self.inner),
            _t: PhantomData,
        }
    }
}

impl<T: TopicType> std::fmt::Debug for Topic<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic")
            .field("name", &self.inner.ident.name)
            .field("type", &self.inner.type_name)
            .field("subgroup", &self.inner.ident.subgroup)
            .finish()
    }
}

impl<T: TopicType> Topic<T> {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.inner.ident.name
    }
    /// The type's name.
    pub fn type_name(&self) -> &str {
        &self.inner.type_name
    }
    /// The topic's QoS.
    pub fn qos(&self) -> &TopicQos {
        &self.inner.qos
    }
    /// The subgroup that carries it.
    pub fn subgroup(&self) -> SubgroupId {
        self.inner.ident.subgroup
    }
}
