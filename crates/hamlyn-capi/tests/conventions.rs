//! The C API's conventions, checked from Rust through the same `extern "C"` functions C
//! calls: outputs untouched on failure, NULL and bad values refused with codes, handles
//! closed (not dangling) once their node is freed, every handle freed without a leak.

use std::ffi::CStr;
use std::ptr;

use hamlyn_capi::*;

fn name(r: hamlyn_result) -> &'static str {
    // SAFETY: hamlyn_result_name returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(hamlyn_result_name(r as u32)) }
        .to_str()
        .expect("ascii")
}

#[test]
fn failures_leave_outputs_untouched() {
    let sentinel = 0x5A5A_usize as *mut hamlyn_node;
    let mut out = sentinel;
    // SAFETY: a NUL-terminated path and a writable output.
    let r = unsafe { hamlyn_node_connect(c"/nonexistent/hamlyn.sock".as_ptr(), &mut out) };
    assert_eq!(r, hamlyn_result::Connect, "{}", name(r));
    assert_eq!(out, sentinel);

    let mut t = 0x77_usize as *mut hamlyn_ticket;
    // SAFETY: a NUL-terminated string and a writable output.
    let r = unsafe { hamlyn_ticket_from_seed(c"hmseed1-nonsense".as_ptr(), &mut t) };
    assert_eq!(r, hamlyn_result::BadSeed);
    assert_eq!(t, 0x77_usize as *mut hamlyn_ticket);
}

#[test]
fn null_pointers_and_bad_values_are_codes() {
    assert_eq!(
        hamlyn_node_embedded(ptr::null_mut()),
        hamlyn_result::NullArgument
    );
    // SAFETY: NULL is what is being tested; nothing is dereferenced.
    unsafe {
        assert_eq!(
            hamlyn_node_connect(ptr::null(), ptr::null_mut()),
            hamlyn_result::NullArgument
        );
        assert_eq!(
            hamlyn_area_new(ptr::null(), 64, ptr::null_mut()),
            hamlyn_result::NullArgument
        );
        hamlyn_node_free(ptr::null_mut());
        hamlyn_area_free(ptr::null_mut());
    }
    // Not UTF-8.
    let mut t = ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable output.
    let r = unsafe { hamlyn_ticket_from_seed(c"\xff\xfe".as_ptr(), &mut t) };
    assert_eq!(r, hamlyn_result::BadSeed);
    assert!(t.is_null());
}

#[test]
fn a_freed_node_closes_its_handles() {
    let mut node = ptr::null_mut();
    assert_eq!(hamlyn_node_embedded(&mut node), hamlyn_result::Ok);
    let mut area = ptr::null_mut();
    let mut queue = ptr::null_mut();
    // SAFETY: `node` is live; the outputs are writable.
    unsafe {
        assert_eq!(hamlyn_area_new(node, 4096, &mut area), hamlyn_result::Ok);
        assert_eq!(hamlyn_queue_new(node, 0, &mut queue), hamlyn_result::Ok);
        let cfg = hamlyn_slot_config {
            mode: 7,
            ..hamlyn_slot_config::default()
        };
        let mut slot = ptr::null_mut();
        assert_eq!(
            hamlyn_slot_new(node, area, ptr::null(), &cfg, &mut slot),
            hamlyn_result::InvalidArgument
        );
        assert!(slot.is_null());
        hamlyn_node_free(node);
    }
    let mut mem = ptr::null_mut();
    let mut len = 0u64;
    let mut n = hamlyn_notification::default();
    // SAFETY: `area` and `queue` are live handles (their node is freed, not they).
    unsafe {
        assert_eq!(
            hamlyn_area_memory(area, &mut mem, &mut len),
            hamlyn_result::Closed
        );
        assert!(mem.is_null() && len == 0);
        assert_eq!(hamlyn_queue_poll(queue, &mut n), hamlyn_result::Closed);
        hamlyn_queue_free(queue);
        hamlyn_area_free(area);
    }
}
