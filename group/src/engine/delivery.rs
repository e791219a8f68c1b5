//! Copying delivered messages out of the rings into delivery batches (large ones are
//! lent in place: [`crate::large`]).

use std::collections::VecDeque;
use std::sync::Arc;

use spindle_transport_rdma::{NodeId, WORD_BYTES};

use super::{DeliveryBatch, Engine, Meta};
use crate::layout::{SubgroupId, NULL_LEN, SLOT_HEADER_BYTES};

impl Engine {
    /// [`Engine::try_deliver_one`] where no caller takes the error: a sender whose slot
    /// changed since it was received is reported ([`Engine::misbehaved`]) and its message
    /// is not delivered (0 bytes).
    pub(super) fn deliver_one(&mut self, i: usize, rank: usize, k: u64) -> usize {
        match self.try_deliver_one(i, rank, k) {
            Ok(bytes) => bytes,
            Err((peer, detail)) => {
                self.misbehaved(i, peer, detail);
                0
            }
        }
    }

    /// Appends message `k` of sender `rank` to the subgroup's open delivery batch; returns
    /// its bytes (0 for a null or a re-send already delivered). The slot is the sender's
    /// to write even now, so what it held when it was received is checked again, and a
    /// large message is delivered by what its announcement said then
    /// ([`crate::large::Large::check_unchanged`]): `Err` names the sender and what
    /// changed, and nothing is delivered.
    pub(super) fn try_deliver_one(
        &mut self,
        i: usize,
        rank: usize,
        k: u64,
    ) -> std::result::Result<usize, (NodeId, String)> {
        let s = &mut self.subgroups[i];
        let slot = s.geom.slot(rank, k);
        let len_word = s.region.load_u64(slot + WORD_BYTES);
        let announced = match &s.large {
            Some(l) => l
                .check_unchanged(&s.region, &s.geom, rank, k, len_word)
                .map_err(|e| (s.senders[rank], e))?,
            None => None,
        };
        if announced.is_none()
            && len_word != NULL_LEN
            && len_word > s.geom.slot_payload_bytes as u64
        {
            return Err((
                s.senders[rank],
                format!(
                    "message {k} was overwritten before delivery: it claims {len_word} \
                     bytes, the slot holds {}",
                    s.geom.slot_payload_bytes
                ),
            ));
        }
        s.delivered += 1;
        let large = match (announced, &mut s.large) {
            (Some(a), Some(l)) => Some((a, l)),
            _ => None,
        };
        if k < s.skip[rank] {
            // A re-send of a message this node delivered in the previous view.
            if let Some((a, l)) = large {
                l.skip(rank, a);
            }
            return Ok(0);
        }
        let len = match &large {
            Some((a, _)) => a.size,
            None if len_word == NULL_LEN => {
                self.stats.nulls_delivered += 1;
                return Ok(0);
            }
            None => len_word as usize,
        };
        self.stats.delivered += 1;
        let global_index = s.geom.global_index(rank, k);
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
        // The length is the slot's (checked against it just above) or the RDMC
        // transfer's (checked at receipt); a delivery prefix hands over only the
        // message's first bytes.
        let full_len = len;
        let len = len.min(s.delivery_prefix);
        let in_place = match large {
            // Left in its RDMC buffer, which the batch pins: no copy.
            Some((a, l)) => match l.take(rank, a, len) {
                Ok(view) => {
                    batch.in_place.push(view);
                    Some((batch.in_place.len() - 1) as u32)
                }
                Err(_) => return Ok(0),
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
                    return Ok(0);
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
        Ok(len)
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
