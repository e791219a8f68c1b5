//! Copying delivered messages out of the rings into delivery batches (large ones are
//! lent in place: [`crate::large`]).

use std::collections::VecDeque;
use std::sync::Arc;

use spindle_transport_rdma::{NodeId, WORD_BYTES};

use super::{DeliveryBatch, Engine, Meta};
use crate::large::Large;
use crate::layout::{SubgroupId, NULL_LEN, RDMC_LEN, SLOT_HEADER_BYTES};

impl Engine {
    /// Appends message `k` of sender `rank` to the subgroup's open delivery batch; returns
    /// its bytes (0 for a null or a re-send already delivered).
    pub(super) fn deliver_one(&mut self, i: usize, rank: usize, k: u64) -> usize {
        let s = &mut self.subgroups[i];
        let slot = s.geom.slot(rank, k);
        let mut len = s.region.load_u64(slot + WORD_BYTES);
        s.delivered += 1;
        let large = if let (RDMC_LEN, Some(l)) = (len, &mut s.large) {
            len = Large::size(&s.region, &s.geom, rank, k) as u64;
            Some(l)
        } else {
            None
        };
        if k < s.skip[rank] {
            // A re-send of a message this node delivered in the previous view.
            if let Some(l) = large {
                l.skip(&s.region, &s.geom, rank, k);
            }
            return 0;
        }
        if len == NULL_LEN {
            self.stats.nulls_delivered += 1;
            return 0;
        }
        self.stats.delivered += 1;
        let global_index = s.geom.global_index(rank, k);
        let len = len as usize;
        let batch = open_batch(
            &mut self.deliveries,
            &mut self.spare_batches,
            &mut self.stats.delivery_batches,
            self.techniques.batched_upcall && s.batch_open,
            s.spec.id,
            &s.senders,
        );
        s.batch_open = true;
        let start = batch.payload.len();
        // The length was checked against the slot (or the RDMC transfer) at receipt and
        // before delivery; a delivery prefix hands over only the message's first bytes.
        let full_len = len;
        let len = len.min(s.delivery_prefix);
        let in_place = match large {
            // Left in its RDMC buffer, which the batch pins: no copy.
            Some(l) => match l.take(&s.region, &s.geom, rank, k, len) {
                Ok(view) => {
                    batch.in_place.push(view);
                    Some((batch.in_place.len() - 1) as u32)
                }
                Err(_) => return 0,
            },
            // Appended without zero-filling first: one copy per delivered byte.
            None => match s.region.read_append_guarded(
                slot + SLOT_HEADER_BYTES,
                len,
                &mut batch.payload,
            ) {
                Ok(()) => None,
                Err(_) => {
                    batch.payload.truncate(start);
                    return 0;
                }
            },
        };
        batch.metas.push(Meta {
            global_index,
            sender_rank: rank as u32,
            sender_seq: k,
            start,
            len,
            full_len,
            in_place,
        });
        len
    }

    /// Closes this step's delivery batch and records the delivered count in the row.
    pub(super) fn finish_deliveries(&mut self, i: usize) {
        let s = &mut self.subgroups[i];
        s.batch_open = false;
        let word = s.geom.senders;
        let my_rank = s.my_rank;
        let d = s.delivered;
        if s.region.load_u64(s.geom.delivered_num(my_rank)) != d {
            s.region.store_u64(s.geom.delivered_num(my_rank), d);
            self.note_ctrl(i, word);
        }
    }
}

/// The batch a delivery of subgroup `subgroup` goes into: the last one queued when
/// `append` (batched upcalls and a batch of this subgroup open this step), else a new
/// one — a spare when there is one — queued with the subgroup's `senders` (counted in
/// `batches`).
pub(super) fn open_batch<'a>(
    deliveries: &'a mut VecDeque<DeliveryBatch>,
    spare: &mut Vec<DeliveryBatch>,
    batches: &mut u64,
    append: bool,
    subgroup: SubgroupId,
    senders: &Arc<[NodeId]>,
) -> &'a mut DeliveryBatch {
    if !append {
        let batch = match spare.pop() {
            Some(mut b) => {
                b.subgroup = subgroup;
                b.senders = Arc::clone(senders);
                b.clear();
                b
            }
            None => DeliveryBatch {
                subgroup,
                senders: Arc::clone(senders),
                metas: Vec::new(),
                payload: Vec::new(),
                in_place: Vec::new(),
            },
        };
        deliveries.push_back(batch);
        *batches += 1;
    }
    deliveries.back_mut().expect("a batch was just ensured")
}
