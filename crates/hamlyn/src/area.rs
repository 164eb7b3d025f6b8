//! Areas: registered shared memory that messages land in or are sent from, and metadata
//! areas of 128-byte entries (seed 000 §2.2, §2.4).

use std::ops::Range;
use std::sync::Arc;

use hamlyn_shm::region::ShmRegion;
use hamlyn_wire::control::{Reply, Request};
use hamlyn_wire::entry::meta_off;
use hamlyn_wire::{MetaEntry, META_ENTRY_LEN};

use crate::error::Error;
use crate::node::Shared;

/// An area's memory and registration; unregistered when the last handle goes.
pub(crate) struct AreaInner {
    pub(crate) id: u32,
    pub(crate) region: ShmRegion,
    pub(crate) shared: Arc<Shared>,
}

impl Drop for AreaInner {
    fn drop(&mut self) {
        // Best effort: if the connection is gone, so is the registration. Slots and
        // pending sends hold the area, so nothing the engine still uses is unregistered.
        let _ = self
            .shared
            .control()
            .call_ok(&Request::UnregisterArea { area: self.id });
    }
}

/// Registered memory (a sealed memfd shared with the engine): messages land in it through
/// a [`crate::Slot`], or are sent from it by a gather [`crate::Data`].
///
/// Cloning is cheap and shares the area. The registration ends when the last clone (and
/// every slot and pending send using it) is gone.
#[derive(Clone)]
#[must_use = "dropping the last handle of an Area unregisters it from the engine"]
pub struct Area {
    pub(crate) inner: Arc<AreaInner>,
}

impl std::fmt::Debug for Area {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Area")
            .field("node", &self.inner.shared.node)
            .field("id", &self.inner.id)
            .field("len", &self.inner.region.len())
            .finish()
    }
}

fn out_of_range(what: &'static str, start: u64, n: u64, len: u64) -> Error {
    Error::OutOfRange {
        what,
        start,
        end: u128::from(start) + u128::from(n),
        len,
    }
}

impl Area {
    pub(crate) fn register(shared: &Arc<Shared>, len: u64) -> Result<Area, Error> {
        let size = usize::try_from(len).map_err(|_| Error::InvalidArgument("area too large"))?;
        let region = ShmRegion::create("hamlyn-area", size)?;
        let mut control = shared.control();
        let (reply, fds) = control.call(&Request::RegisterArea { len }, &[region.fd()])?;
        let id = match reply {
            Reply::Area { area } if fds.is_empty() => area,
            _ => return Err(control.violation("expected Area")),
        };
        drop(control);
        Ok(Area {
            inner: Arc::new(AreaInner {
                id,
                region,
                shared: shared.clone(),
            }),
        })
    }

    /// The engine's id for the area.
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Bytes in the area.
    pub fn len(&self) -> u64 {
        self.inner.region.len() as u64
    }

    /// The address of the area's first byte, for foreign-language bindings (the C API
    /// hands it to C callers). The [`Area::len`] bytes from it stay mapped while any clone
    /// of this area lives. The engine (and senders) write them concurrently: never form a
    /// Rust reference to them; [`Area::read`] and [`Area::write`] are the safe accessors.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.region.as_ptr()
    }

    /// Whether the area has no bytes (never: empty areas are refused).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn offset(&self, off: u64, n: usize) -> Result<usize, Error> {
        let len = self.len();
        match off.checked_add(n as u64) {
            Some(end) if end <= len => usize::try_from(off).map_err(|_| Error::Protocol("offset")),
            _ => Err(out_of_range("area", off, n as u64, len)),
        }
    }

    /// Copies `buf.len()` bytes at `off` out of the area.
    ///
    /// The engine may be writing the same bytes (a message arriving): read a range only
    /// after its notification, or expect a torn copy.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        let at = self.offset(off, buf.len())?;
        Ok(self.inner.region.read(at, buf)?)
    }

    /// `len` bytes at `off`, copied into a new vector.
    pub fn read_vec(&self, off: u64, len: usize) -> Result<Vec<u8>, Error> {
        let mut v = vec![0u8; len];
        self.read(off, &mut v)?;
        Ok(v)
    }

    /// Copies `bytes` into the area at `off`. Do not rewrite bytes a pending send is
    /// reading ([`crate::Terminus::can_reuse`] says when they are free again).
    pub fn write(&self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        let at = self.offset(off, bytes.len())?;
        Ok(self.inner.region.write(at, bytes)?)
    }

    /// A gather span of this area, for [`crate::Data::Gather`].
    pub fn span(&self, offset: u64, len: u64) -> Span<'_> {
        Span {
            area: self,
            offset,
            len,
        }
    }

    /// Whether the area was registered through the node handle with instance `instance`.
    pub(crate) fn belongs_to(&self, instance: u64) -> bool {
        self.inner.shared.instance == instance
    }
}

/// `len` bytes at `offset` of an [`Area`]: one piece of a gather send.
#[derive(Clone, Copy, Debug)]
pub struct Span<'a> {
    /// The area (one of the sending node's).
    pub area: &'a Area,
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// A range of 128-byte metadata entries in an area: where the engine deposits each
/// message's metadata and counts its packets, and where paranoid slots keep each entry's
/// own key and byte range (the layout: docs/spec/wire.md §4).
///
/// The owner writes the paranoid fields and the armed bit; the engine writes the rest.
#[derive(Clone, Debug)]
#[must_use = "a MetaArea holds its area: dropping the last handle unregisters it"]
pub struct MetaArea {
    area: Area,
    base: u64,
    count: u32,
}

impl MetaArea {
    /// Entries `0..count` starting at byte `base` of `area` (`base` a multiple of 128).
    pub fn new(area: &Area, base: u64, count: u32) -> Result<MetaArea, Error> {
        if base % META_ENTRY_LEN as u64 != 0 {
            return Err(Error::InvalidArgument(
                "metadata entries must start at a multiple of 128 bytes",
            ));
        }
        let bytes = u64::from(count) * META_ENTRY_LEN as u64;
        if base.checked_add(bytes).is_none_or(|end| end > area.len()) {
            return Err(out_of_range("area", base, bytes, area.len()));
        }
        Ok(MetaArea {
            area: area.clone(),
            base,
            count,
        })
    }

    /// The area the entries are in.
    pub fn area(&self) -> &Area {
        &self.area
    }

    /// Byte offset of entry 0 in the area.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Number of entries.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Byte offset of `field` of entry `index` in the area.
    fn at(&self, index: u32, field: usize) -> Result<u64, Error> {
        if index >= self.count {
            return Err(Error::MetaOutOfRange {
                start: u64::from(index),
                end: u64::from(index) + 1,
                count: self.count,
            });
        }
        Ok(self.base + u64::from(index) * META_ENTRY_LEN as u64 + field as u64)
    }

    /// A copy of entry `index`.
    pub fn entry(&self, index: u32) -> Result<MetaEntry, Error> {
        let mut b = [0u8; META_ENTRY_LEN];
        self.area.read(self.at(index, 0)?, &mut b)?;
        MetaEntry::read(&b).map_err(|_| Error::Protocol("metadata entry"))
    }

    /// The user metadata the last message deposited in entry `index` (at most 60 bytes).
    pub fn metadata(&self, index: u32) -> Result<Vec<u8>, Error> {
        Ok(self.entry(index)?.metadata().to_vec())
    }

    /// Gives entry `index` its own key and slot-relative byte range (paranoid modes):
    /// only packets presenting `key` and landing in `bytes` are accepted for it. The key
    /// is written first, so holders of the entry's previous key are shut out before the
    /// range changes.
    pub fn set_paranoid(&self, index: u32, key: u64, bytes: Range<u64>) -> Result<(), Error> {
        if bytes.start > bytes.end {
            return Err(Error::InvalidArgument("byte range ends before it starts"));
        }
        self.area
            .write(self.at(index, meta_off::PARANOID_KEY)?, &key.to_le_bytes())?;
        self.area.write(
            self.at(index, meta_off::PARANOID_LOW)?,
            &bytes.start.to_le_bytes(),
        )?;
        self.area.write(
            self.at(index, meta_off::PARANOID_HIGH)?,
            &bytes.end.to_le_bytes(),
        )
    }

    fn state(&self, index: u32) -> Result<u16, Error> {
        let mut b = [0u8; 2];
        self.area.read(self.at(index, meta_off::STATE)?, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    fn set_state(&self, index: u32, state: u16) -> Result<(), Error> {
        self.area
            .write(self.at(index, meta_off::STATE)?, &state.to_le_bytes())
    }

    /// (Re-)arms a paranoid_one_shot entry: it accepts one more message. The engine
    /// disarms it when that message completes.
    pub fn arm(&self, index: u32) -> Result<(), Error> {
        let s = self.state(index)?;
        self.set_state(index, s | MetaEntry::ARMED)
    }

    /// Disarms entry `index`: a paranoid_one_shot slot refuses messages to it.
    pub fn disarm(&self, index: u32) -> Result<(), Error> {
        let s = self.state(index)?;
        self.set_state(index, s & !MetaEntry::ARMED)
    }

    /// Whether entry `index` is armed.
    pub fn is_armed(&self, index: u32) -> Result<bool, Error> {
        Ok(self.state(index)? & MetaEntry::ARMED != 0)
    }

    /// Sets the owner's cookie of entry `index` (the paper's receive-class pointer).
    pub fn set_cookie(&self, index: u32, cookie: u64) -> Result<(), Error> {
        self.area
            .write(self.at(index, meta_off::COOKIE)?, &cookie.to_le_bytes())
    }

    /// The owner's cookie of entry `index` ([`MetaArea::set_cookie`]).
    pub fn cookie(&self, index: u32) -> Result<u64, Error> {
        self.read_u64(index, meta_off::COOKIE)
    }

    /// The first offset (slot-relative) of the last message completed on entry `index`.
    pub fn message_offset(&self, index: u32) -> Result<u64, Error> {
        self.read_u64(index, meta_off::MESSAGE_OFFSET)
    }

    fn read_u64(&self, index: u32, field: usize) -> Result<u64, Error> {
        let mut b = [0u8; 8];
        self.area.read(self.at(index, field)?, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Zeroes entry `index`'s packet accumulator and the rest of its assembly state (to
    /// reuse an entry whose message was abandoned part-way; never while packets may
    /// still arrive for it).
    pub fn reset_accumulator(&self, index: u32) -> Result<(), Error> {
        self.area
            .write(self.at(index, meta_off::ACCUMULATOR)?, &0u32.to_le_bytes())?;
        self.area.write(
            self.at(index, meta_off::ASSEMBLING_BYTES)?,
            &0u32.to_le_bytes(),
        )?;
        self.area.write(
            self.at(index, meta_off::ASSEMBLING_LOW)?,
            &0u64.to_le_bytes(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fake_node;
    use crate::NodeOptions;

    #[test]
    fn areas_are_shared_with_the_engine_and_bounds_checked() {
        let (node, fake) = fake_node(NodeOptions::default());
        let a = node.area(4096).unwrap();
        assert_eq!((a.len(), a.is_empty()), (4096, false));
        a.write(4090, b"hamlyn").unwrap();
        assert_eq!(a.read_vec(4090, 6).unwrap(), b"hamlyn");
        let mut engine_copy = [0u8; 6];
        let areas = fake.areas.lock().unwrap();
        areas
            .get(&a.id())
            .unwrap()
            .read(4090, &mut engine_copy)
            .unwrap();
        assert_eq!(&engine_copy, b"hamlyn");
        drop(areas);
        assert!(matches!(
            a.write(4091, b"hamlyn"),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            a.read(u64::MAX, &mut [0u8; 2]),
            Err(Error::OutOfRange { .. })
        ));
        assert!(a.read(4096, &mut []).is_ok());
    }

    #[test]
    fn meta_areas_are_aligned_and_inside_their_area() {
        let (node, _fake) = fake_node(NodeOptions::default());
        let a = node.area(1024).unwrap();
        assert!(matches!(
            MetaArea::new(&a, 64, 1),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            MetaArea::new(&a, 128, 8),
            Err(Error::OutOfRange { .. })
        ));
        let m = MetaArea::new(&a, 128, 7).unwrap();
        assert!(matches!(m.entry(7), Err(Error::MetaOutOfRange { .. })));
        m.set_cookie(6, 0xC00C1E).unwrap();
        m.set_paranoid(6, 77, 10..20).unwrap();
        let e = m.entry(6).unwrap();
        assert_eq!(e.cookie.get(), 0xC00C1E);
        assert_eq!(
            (
                e.paranoid_key.get(),
                e.paranoid_low.get(),
                e.paranoid_high.get()
            ),
            (77, 10, 20)
        );
        let mut raw = [0u8; 8];
        a.read(128 + 6 * 128 + meta_off::COOKIE as u64, &mut raw)
            .unwrap();
        assert_eq!(
            u64::from_le_bytes(raw),
            0xC00C1E,
            "entry 6 of a range based at 128"
        );
        assert!(matches!(
            m.set_paranoid(0, 1, Range { start: 20, end: 10 }),
            Err(Error::InvalidArgument(_))
        ));
        // Metadata deposited by the engine reads back through the helpers.
        a.write(128, b"meta!").unwrap();
        a.write(128 + meta_off::META_LEN as u64, &5u16.to_le_bytes())
            .unwrap();
        assert_eq!(m.metadata(0).unwrap(), b"meta!");
    }
}
