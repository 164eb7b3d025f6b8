//! Slots: part of an area named by a key and a mode; tickets to them.

use std::sync::{Arc, Mutex};

use hamlyn::{Slot, SlotMode, SlotPerms};

use crate::{
    free_box, guard, hamlyn_area, hamlyn_meta_area, hamlyn_node, hamlyn_result, hamlyn_ticket,
    handle, lock, non_null, put, Life,
};

/// Normal mode: the slot key protects the whole slot (needs a metadata area).
pub const HAMLYN_SLOT_NORMAL: u32 = 0;
/// Paranoid mode: every metadata entry gets its own key and byte range when a ticket for
/// it is made (per-sender protection).
pub const HAMLYN_SLOT_PARANOID: u32 = 1;
/// Paranoid one-shot: as paranoid, and an entry takes one message, then refuses more until
/// re-armed (`hamlyn_meta_area_arm` or a new ticket).
pub const HAMLYN_SLOT_PARANOID_ONE_SHOT: u32 = 2;
/// Fast mode: single-packet messages whose one-word tag travels in the notification; no
/// metadata area.
pub const HAMLYN_SLOT_FAST: u32 = 3;

/// Remote peers may write (the default when `perms` is 0).
pub const HAMLYN_PERM_WRITE: u32 = 1;
/// Remote peers may read (`hamlyn_terminus_read`).
pub const HAMLYN_PERM_READ: u32 = 2;
/// Remote peers may run atomics on 8-byte aligned words.
pub const HAMLYN_PERM_ATOMIC: u32 = 4;

/// `hamlyn_slot_config.flags`: the slot reports arrivals to notification queue `queue`.
/// Without it the slot never notifies (deposits are counted, nothing is posted).
pub const HAMLYN_SLOT_QUEUE: u32 = 1;
/// `hamlyn_slot_config.flags`: **danger**, a direct slot: any holder of a ticket to it on
/// this node may map its memory and notification queue and deposit without the engine
/// (`hamlyn_direct_open`). Normal and fast modes only. What the receiver gives up
/// (protection of the rest of those areas, revocation of mappings already given, the
/// engine's accounting) is listed in the Rust docs of `SlotBuilder::danger_direct`.
pub const HAMLYN_SLOT_DANGER_DIRECT: u32 = 2;

/// How to make a slot (`hamlyn_slot_new`). All zeros is a valid configuration: normal
/// mode, writes only, the whole area, no notification queue.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_slot_config {
    /// `HAMLYN_SLOT_NORMAL`, `_PARANOID`, `_PARANOID_ONE_SHOT` or `_FAST`.
    pub mode: u32,
    /// `HAMLYN_PERM_*` bits; 0 means `HAMLYN_PERM_WRITE`.
    pub perms: u32,
    /// `HAMLYN_SLOT_QUEUE`, `HAMLYN_SLOT_DANGER_DIRECT` bits.
    pub flags: u32,
    /// The notification queue, with `HAMLYN_SLOT_QUEUE`.
    pub queue: u16,
    /// Start of the slot in the area (bytes).
    pub offset: u64,
    /// Bytes in the slot; 0 means to the end of the area.
    pub len: u64,
}

/// A slot. Destroyed (its tickets stop working) by `hamlyn_slot_free`.
pub struct hamlyn_slot {
    life: Arc<Life>,
    slot: Mutex<Slot>,
}

/// Creates a slot over `area` with metadata entries `meta` (NULL for a fast slot) and
/// `config` (NULL for the defaults); `*out` is the new slot.
///
/// # Safety
///
/// `node` and `area` are NULL or live; `meta` and `config` are NULL or valid; `out` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_slot_new(
    node: *const hamlyn_node,
    area: *const hamlyn_area,
    meta: *const hamlyn_meta_area,
    config: *const hamlyn_slot_config,
    out: *mut *mut hamlyn_slot,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let node = n.get()?;
        // SAFETY: the function's contract.
        let area = unsafe { handle(area) }?.get()?;
        non_null(out)?;
        // SAFETY: the function's contract: NULL or a valid config, copied out.
        let cfg = unsafe { config.as_ref() }.copied().unwrap_or_default();
        let mode = match cfg.mode {
            HAMLYN_SLOT_NORMAL => SlotMode::Normal,
            HAMLYN_SLOT_PARANOID => SlotMode::Paranoid,
            HAMLYN_SLOT_PARANOID_ONE_SHOT => SlotMode::ParanoidOneShot,
            HAMLYN_SLOT_FAST => SlotMode::Fast,
            _ => return Err(hamlyn_result::InvalidArgument),
        };
        let all_perms = HAMLYN_PERM_WRITE | HAMLYN_PERM_READ | HAMLYN_PERM_ATOMIC;
        let all_flags = HAMLYN_SLOT_QUEUE | HAMLYN_SLOT_DANGER_DIRECT;
        if cfg.perms & !all_perms != 0 || cfg.flags & !all_flags != 0 {
            return Err(hamlyn_result::InvalidArgument);
        }
        let perms = if cfg.perms == 0 {
            HAMLYN_PERM_WRITE
        } else {
            cfg.perms
        };
        let perms = SlotPerms {
            write: perms & HAMLYN_PERM_WRITE != 0,
            read: perms & HAMLYN_PERM_READ != 0,
            atomic: perms & HAMLYN_PERM_ATOMIC != 0,
        };
        let end = if cfg.len == 0 {
            area.len()
        } else {
            cfg.offset
                .checked_add(cfg.len)
                .ok_or(hamlyn_result::OutOfRange)?
        };
        let mut b = node
            .slot(area)
            .mode(mode)
            .perms(perms)
            .range(cfg.offset..end);
        // SAFETY: the function's contract: NULL or a live metadata area.
        let meta = unsafe { meta.as_ref() };
        if let Some(m) = meta {
            b = b.meta(m.get()?);
        }
        if cfg.flags & HAMLYN_SLOT_QUEUE != 0 {
            b = b.queue(cfg.queue);
        }
        if cfg.flags & HAMLYN_SLOT_DANGER_DIRECT != 0 {
            b = b.danger_direct();
        }
        let slot = b.create()?;
        let h = Box::into_raw(Box::new(hamlyn_slot {
            life: n.life.clone(),
            slot: Mutex::new(slot),
        }));
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Runs `f` on the slot behind `slot`, if it and its node are live.
///
/// # Safety
///
/// `slot` is NULL or a live slot.
unsafe fn with<T>(
    slot: *const hamlyn_slot,
    f: impl FnOnce(&mut Slot) -> Result<T, hamlyn_result>,
) -> Result<T, hamlyn_result> {
    // SAFETY: the caller's contract.
    let s = unsafe { handle(slot) }?;
    s.life.check()?;
    f(&mut *lock(&s.slot)?)
}

/// A ticket for bytes `offset..offset + len` of the slot (slot-relative) and metadata
/// entries `meta_first..meta_first + meta_count` (ignored for fast slots); `*out` is the
/// new ticket. On a paranoid slot this gives those entries a fresh key and the byte range
/// (earlier tickets for them stop working) and, one-shot, arms them.
///
/// # Safety
///
/// `slot` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_slot_ticket(
    slot: *const hamlyn_slot,
    offset: u64,
    len: u64,
    meta_first: u32,
    meta_count: u32,
    out: *mut *mut hamlyn_ticket,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        let end = offset.checked_add(len).ok_or(hamlyn_result::OutOfRange)?;
        let meta_end = meta_first
            .checked_add(meta_count)
            .ok_or(hamlyn_result::OutOfRange)?;
        // SAFETY: the function's contract.
        let t = unsafe { with(slot, |s| Ok(s.ticket(offset..end, meta_first..meta_end)?)) }?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, crate::ticket::give(t)) };
        Ok(())
    })
}

/// A ticket for the whole slot and all its metadata entries; `*out` is the new ticket.
///
/// # Safety
///
/// `slot` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_slot_ticket_all(
    slot: *const hamlyn_slot,
    out: *mut *mut hamlyn_ticket,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let t = unsafe { with(slot, |s| Ok(s.ticket_all()?)) }?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, crate::ticket::give(t)) };
        Ok(())
    })
}

/// The slot's id (`*out`), as notifications name it.
///
/// # Safety
///
/// `slot` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_slot_id(slot: *const hamlyn_slot, out: *mut u32) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let id = unsafe { with(slot, |s| Ok(s.id().0)) }?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, id) };
        Ok(())
    })
}

/// Gives the slot a new key (and lifts a revocation): every ticket made before stops
/// working (their sends fail with `HAMLYN_REJECT_BAD_KEY`).
///
/// # Safety
///
/// `slot` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_slot_rekey(slot: *const hamlyn_slot) -> hamlyn_result {
    // SAFETY: the function's contract.
    guard(|| unsafe { with(slot, |s| Ok(s.rekey().map(drop)?)) })
}

/// Revokes every ticket to the slot until it is rekeyed.
///
/// # Safety
///
/// `slot` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_slot_revoke(slot: *const hamlyn_slot) -> hamlyn_result {
    // SAFETY: the function's contract.
    guard(|| unsafe { with(slot, |s| Ok(s.revoke()?)) })
}

/// Write-inhibits the slot (`on` non-zero) or lifts the inhibition.
///
/// # Safety
///
/// `slot` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_slot_inhibit(slot: *const hamlyn_slot, on: u32) -> hamlyn_result {
    // SAFETY: the function's contract.
    guard(|| unsafe { with(slot, |s| Ok(s.inhibit(on != 0)?)) })
}

/// Destroys the slot (its tickets stop working) and frees the handle (NULL is ignored).
///
/// # Safety
///
/// `slot` is NULL or a live slot, not used again.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_slot_free(slot: *mut hamlyn_slot) {
    // SAFETY: the function's contract; made with `Box::into_raw`.
    unsafe { free_box(slot) }
}
