//! Areas (registered shared memory) and metadata areas.

use std::sync::Arc;

use hamlyn::{Area, MetaArea};

use crate::{bytes, free_box, guard, hamlyn_node, hamlyn_result, handle, non_null, put, Life};

/// Registered memory (a sealed memfd shared with the engine) that messages land in or are
/// sent from. `hamlyn_area_memory` gives its address.
pub struct hamlyn_area {
    pub(crate) life: Arc<Life>,
    pub(crate) area: Area,
}

impl hamlyn_area {
    pub(crate) fn get(&self) -> Result<&Area, hamlyn_result> {
        self.life.check()?;
        Ok(&self.area)
    }
}

/// An area of 128-byte metadata entries (every slot mode but fast needs one).
pub struct hamlyn_meta_area {
    pub(crate) life: Arc<Life>,
    pub(crate) meta: MetaArea,
}

impl hamlyn_meta_area {
    pub(crate) fn get(&self) -> Result<&MetaArea, hamlyn_result> {
        self.life.check()?;
        Ok(&self.meta)
    }
}

/// Registers a new area of `len` bytes (zeroed) with `node`'s engine; `*out` is the new
/// area, freed with `hamlyn_area_free`.
///
/// # Safety
///
/// `node` is NULL or a live node; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_area_new(
    node: *const hamlyn_node,
    len: u64,
    out: *mut *mut hamlyn_area,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let node = n.get()?;
        non_null(out)?;
        if len == 0 {
            return Err(hamlyn_result::InvalidArgument);
        }
        let area = node.area(len)?;
        let h = Box::into_raw(Box::new(hamlyn_area {
            life: n.life.clone(),
            area,
        }));
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

/// The area's memory: `*out_ptr` its first byte, `*out_len` its length. The memory stays
/// mapped until the area is freed (even after its node is freed), and is shared: the
/// engine writes arriving messages into it, so read a message's bytes only after its
/// notification, and do not rewrite bytes a pending send is reading.
///
/// # Safety
///
/// `area` is NULL or a live area; `out_ptr` and `out_len` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_area_memory(
    area: *const hamlyn_area,
    out_ptr: *mut *mut u8,
    out_len: *mut u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let area = unsafe { handle(area) }?.get()?;
        non_null(out_ptr)?;
        non_null(out_len)?;
        // SAFETY: both outputs are non-NULL and writable (the contract).
        unsafe {
            put(out_ptr, area.as_ptr());
            put(out_len, area.len());
        }
        Ok(())
    })
}

/// Copies `len` bytes at `offset` of the area into `buf` (`HAMLYN_RESULT_OUT_OF_RANGE`
/// if they are not all in the area).
///
/// # Safety
///
/// `area` is NULL or a live area; `buf` is NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_area_read(
    area: *const hamlyn_area,
    offset: u64,
    buf: *mut u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let area = unsafe { handle(area) }?.get()?;
        if len == 0 {
            return Ok(());
        }
        non_null(buf)?;
        // SAFETY: `buf` is non-NULL and writable for `len` bytes (the contract); it is the
        // caller's memory, not the area's.
        let dst = unsafe { std::slice::from_raw_parts_mut(buf, len) };
        area.read(offset, dst)?;
        Ok(())
    })
}

/// Copies `len` bytes from `data` into the area at `offset`.
///
/// # Safety
///
/// `area` is NULL or a live area; `data` is NULL or readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_area_write(
    area: *const hamlyn_area,
    offset: u64,
    data: *const u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let area = unsafe { handle(area) }?.get()?;
        // SAFETY: the function's contract.
        let src = unsafe { bytes(data, len) }?;
        area.write(offset, src)?;
        Ok(())
    })
}

/// Frees an area handle (NULL is ignored). The registration ends when no slot or pending
/// send uses the area any more; the memory from `hamlyn_area_memory` is unmapped then.
///
/// # Safety
///
/// `area` is NULL or a live area, not used again.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_area_free(area: *mut hamlyn_area) {
    // SAFETY: the function's contract; made with `Box::into_raw`.
    unsafe { free_box(area) }
}

/// Registers a new metadata area of `count` entries (128 bytes each); `*out` is the new
/// handle, freed with `hamlyn_meta_area_free`.
///
/// # Safety
///
/// `node` is NULL or a live node; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_meta_area_new(
    node: *const hamlyn_node,
    count: u32,
    out: *mut *mut hamlyn_meta_area,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let node = n.get()?;
        non_null(out)?;
        if count == 0 {
            return Err(hamlyn_result::InvalidArgument);
        }
        let meta = node.meta_area(count)?;
        let h = Box::into_raw(Box::new(hamlyn_meta_area {
            life: n.life.clone(),
            meta,
        }));
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Copies the user metadata the last message left in entry `index` (at most 60 bytes)
/// into `buf` (capacity `cap`); `*out_len` is its length. `HAMLYN_RESULT_BUFFER_TOO_SMALL`
/// if it does not fit (then `*out_len` is the length needed and `buf` is untouched).
///
/// # Safety
///
/// `meta` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_len` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_meta_area_metadata(
    meta: *const hamlyn_meta_area,
    index: u32,
    buf: *mut u8,
    cap: usize,
    out_len: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let meta = unsafe { handle(meta) }?.get()?;
        non_null(out_len)?;
        if cap > 0 {
            non_null(buf)?;
        }
        let md = meta.metadata(index)?;
        // SAFETY: `out_len` is non-NULL and writable (the contract).
        unsafe { put(out_len, md.len()) };
        if md.len() > cap {
            return Err(hamlyn_result::BufferTooSmall);
        }
        if !md.is_empty() {
            // SAFETY: `buf` is non-NULL (checked: `cap >= md.len() > 0`) and writable for
            // `cap` bytes.
            unsafe { std::ptr::copy_nonoverlapping(md.as_ptr(), buf, md.len()) };
        }
        Ok(())
    })
}

/// Re-arms entry `index` of a paranoid one-shot slot's metadata: it accepts one more
/// message.
///
/// # Safety
///
/// `meta` is NULL or a live metadata area.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_meta_area_arm(
    meta: *const hamlyn_meta_area,
    index: u32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let meta = unsafe { handle(meta) }?.get()?;
        meta.arm(index)?;
        Ok(())
    })
}

/// Whether entry `index` is armed (`*out` 1 or 0).
///
/// # Safety
///
/// `meta` is NULL or a live metadata area; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_meta_area_is_armed(
    meta: *const hamlyn_meta_area,
    index: u32,
    out: *mut u32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let meta = unsafe { handle(meta) }?.get()?;
        non_null(out)?;
        let armed = meta.is_armed(index)?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, u32::from(armed)) };
        Ok(())
    })
}

/// Frees a metadata area handle (NULL is ignored).
///
/// # Safety
///
/// `meta` is NULL or a live metadata area, not used again.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_meta_area_free(meta: *mut hamlyn_meta_area) {
    // SAFETY: the function's contract; made with `Box::into_raw`.
    unsafe { free_box(meta) }
}
