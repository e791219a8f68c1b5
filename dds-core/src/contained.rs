//! What a publisher or subscriber contains (its DDS children): its writers or readers,
//! for `delete_contained_entities`, the precondition on its own deletion and its GROUP
//! access scope. Its participant lists it until it is deleted, so that
//! `DomainParticipant::delete_contained_entities` reaches every entity.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::lock;
use crate::error::{Error, Result};
use crate::group_scope::GroupScope;

/// A publisher's writers or a subscriber's readers (`C`: their core), shared by its
/// clones.
#[derive(Debug)]
pub(crate) struct Contained<C> {
    /// "publisher" or "subscriber", for errors.
    pub(crate) whose: &'static str,
    /// Its entities, in creation order.
    entities: Mutex<Vec<Arc<C>>>,
    /// Its entities' topics, under PRESENTATION GROUP access scope (one subgroup).
    pub(crate) group: Option<GroupScope>,
    /// Deleted (by `delete_publisher`/`delete_subscriber`, or its participant's
    /// `delete_contained_entities`): it creates nothing more.
    deleted: AtomicBool,
}

impl<C> Contained<C> {
    /// An empty publisher's (subscriber's) contents.
    pub(crate) fn new(whose: &'static str, group: Option<GroupScope>) -> Arc<Self> {
        Arc::new(Contained {
            whose,
            entities: Mutex::new(Vec::new()),
            group,
            deleted: AtomicBool::new(false),
        })
    }

    /// `AlreadyDeleted` once the publisher (subscriber) was deleted.
    pub(crate) fn check(&self) -> Result<()> {
        if self.deleted.load(Ordering::Acquire) {
            return Err(Error::AlreadyDeleted(format!(
                "the {} was deleted",
                self.whose
            )));
        }
        Ok(())
    }

    /// Marks it deleted: `PreconditionNotMet` while it still holds entities.
    pub(crate) fn delete(&self) -> Result<()> {
        self.check()?;
        let held = lock(&self.entities).len();
        if held > 0 {
            return Err(Error::PreconditionNotMet(format!(
                "the {} still has {held} {}; delete them first (delete_contained_entities \
                 deletes them all)",
                self.whose,
                if self.whose == "publisher" {
                    "writers"
                } else {
                    "readers"
                }
            )));
        }
        self.deleted.store(true, Ordering::Release);
        Ok(())
    }

    /// Adds a new entity.
    pub(crate) fn push(&self, c: Arc<C>) {
        lock(&self.entities).push(c);
    }

    /// Removes `c`; false if it is not here.
    pub(crate) fn remove(&self, c: &Arc<C>) -> bool {
        let mut es = lock(&self.entities);
        let before = es.len();
        es.retain(|e| !Arc::ptr_eq(e, c));
        es.len() < before
    }

    /// Whether `c` is one of its entities.
    fn holds(&self, c: &Arc<C>) -> bool {
        lock(&self.entities).iter().any(|e| Arc::ptr_eq(e, c))
    }

    /// The first step of deleting entity `c` (`what` and `id` name it; `deleted`: its
    /// flag): the publisher (subscriber) in its participant's `list` that holds it, once
    /// `withdraw` took back `c`'s interest (false: it was gone already).
    /// `AlreadyDeleted` if it was deleted, `PreconditionNotMet` if another participant
    /// created it.
    pub(crate) fn claim(
        list: &Mutex<Vec<Arc<Contained<C>>>>,
        c: &Arc<C>,
        (what, id, deleted): (&str, u32, &AtomicBool),
        withdraw: impl FnOnce() -> bool,
    ) -> Result<Arc<Self>> {
        let owner = lock(list).iter().find(|k| k.holds(c)).cloned();
        let Some(owner) = owner else {
            return Err(if deleted.load(Ordering::Acquire) {
                Error::AlreadyDeleted(format!("{what} {id}"))
            } else {
                Error::PreconditionNotMet(format!("{what} {id} belongs to another participant"))
            });
        };
        if !withdraw() {
            return Err(Error::AlreadyDeleted(format!("{what} {id}")));
        }
        Ok(owner)
    }

    /// Its entities now, in creation order.
    pub(crate) fn entities(&self) -> Vec<Arc<C>> {
        lock(&self.entities).clone()
    }
}
