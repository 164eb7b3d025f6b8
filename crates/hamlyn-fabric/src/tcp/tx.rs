//! The sending half of a rail: gather writes straight from the caller's slices, and a
//! bounded queue for only what the kernel did not take.
//!
//! [`write_gather`] hands as many pieces as fit in one `writev` to the socket and keeps
//! going until everything is written or the socket would block; it never copies.
//! [`TxQueue`] keeps the unwritten tail of packets (copied once) until the socket is
//! writable again. Both are generic over [`Write`] so they are tested with scripted
//! writers.

use std::io::{self, IoSlice, Write};

/// Most slices handed to one `writev` (well below every IOV_MAX).
const MAX_IOV: usize = 64;

/// The bytes of one packet (or queued bytes followed by a packet) as gather pieces:
/// up to three fixed pieces, then the payload slices.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pieces<'a> {
    head: [&'a [u8]; 3],
    tail: &'a [&'a [u8]],
}

impl<'a> Pieces<'a> {
    /// `head` pieces (empty ones are skipped), then `tail`.
    pub(crate) fn new(head: [&'a [u8]; 3], tail: &'a [&'a [u8]]) -> Pieces<'a> {
        Pieces { head, tail }
    }

    fn iter(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.head.iter().copied().chain(self.tail.iter().copied())
    }

    /// Total bytes.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.iter().map(<[u8]>::len).sum()
    }

    /// Appends every byte from offset `skip` on to `out`.
    pub(crate) fn copy_from(&self, mut skip: usize, out: &mut Vec<u8>) {
        for p in self.iter() {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            out.extend_from_slice(&p[skip..]);
            skip = 0;
        }
    }
}

/// Writes `pieces` from byte `skip` on, with vectored writes, until all is written or
/// the writer would block; returns how many bytes (counted from `skip`) were written.
///
/// `WouldBlock` and `Interrupted` are not errors here; any other error (a broken
/// connection) is returned, and so is a writer that takes zero bytes.
pub(crate) fn write_gather<W: Write>(
    w: &mut W,
    pieces: &Pieces<'_>,
    skip: usize,
) -> io::Result<usize> {
    let mut written = 0;
    loop {
        let mut iov = [IoSlice::new(&[]); MAX_IOV];
        let mut n_iov = 0;
        let mut skip_left = skip + written;
        for p in pieces.iter() {
            if skip_left >= p.len() {
                skip_left -= p.len();
                continue;
            }
            if n_iov == MAX_IOV {
                break;
            }
            iov[n_iov] = IoSlice::new(&p[skip_left..]);
            skip_left = 0;
            n_iov += 1;
        }
        if n_iov == 0 {
            return Ok(written);
        }
        match w.write_vectored(&iov[..n_iov]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(written),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Bytes accepted for sending that the socket has not taken yet.
#[derive(Debug, Default)]
pub(crate) struct TxQueue {
    buf: Vec<u8>,
    head: usize,
}

impl TxQueue {
    /// Bytes waiting.
    pub(crate) fn len(&self) -> usize {
        self.buf.len() - self.head
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The waiting bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    /// Queues the bytes of `pieces` from offset `skip` on (a copy).
    pub(crate) fn push(&mut self, pieces: &Pieces<'_>, skip: usize) {
        pieces.copy_from(skip, &mut self.buf);
    }

    /// Marks `n` waiting bytes as written.
    pub(crate) fn consume(&mut self, n: usize) {
        self.head = (self.head + n).min(self.buf.len());
        if self.head == self.buf.len() {
            self.buf.clear();
            self.head = 0;
        } else if self.head >= (64 << 10) && self.head * 2 >= self.buf.len() {
            self.buf.drain(..self.head);
            self.head = 0;
        }
    }

    /// Writes waiting bytes until none are left or the writer would block; returns the
    /// bytes written.
    pub(crate) fn flush<W: Write>(&mut self, w: &mut W) -> io::Result<usize> {
        if self.is_empty() {
            return Ok(0);
        }
        let n = write_gather(w, &Pieces::new([self.bytes(), &[], &[]], &[]), 0)?;
        self.consume(n);
        Ok(n)
    }

    /// Forgets everything waiting (the connection is gone).
    pub(crate) fn clear(&mut self) {
        self.buf = Vec::new();
        self.head = 0;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    /// A writer that takes at most `per_call` bytes per call, then would block once its
    /// `room` is used up.
    pub(crate) struct Scripted {
        pub(crate) got: Vec<u8>,
        pub(crate) per_call: usize,
        pub(crate) room: usize,
        pub(crate) calls: usize,
        pub(crate) broken: bool,
    }

    impl Scripted {
        pub(crate) fn new(per_call: usize, room: usize) -> Scripted {
            Scripted {
                got: Vec::new(),
                per_call,
                room,
                calls: 0,
                broken: false,
            }
        }
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            if self.broken {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            if self.calls % 3 == 0 {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let mut budget = self.per_call.min(self.room);
            if budget == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(budget);
                self.got.extend_from_slice(&b[..take]);
                budget -= take;
                n += take;
            }
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn gather_writes_everything_when_there_is_room() {
        let tail: Vec<&[u8]> = vec![b"cd", b"", b"efg"];
        let p = Pieces::new([b"a", b"", b"b"], &tail);
        assert_eq!(p.len(), 7);
        let mut w = Scripted::new(2, 100);
        assert_eq!(write_gather(&mut w, &p, 0).unwrap(), 7);
        assert_eq!(w.got, b"abcdefg");
        let mut w = Scripted::new(100, 100);
        assert_eq!(write_gather(&mut w, &p, 3).unwrap(), 4);
        assert_eq!(w.got, b"defg");
    }

    #[test]
    fn more_pieces_than_one_writev_takes() {
        let bytes: Vec<u8> = (0..=255).collect();
        let tail: Vec<&[u8]> = bytes.chunks(1).collect();
        let p = Pieces::new([&[], &[], &[]], &tail);
        let mut w = Scripted::new(usize::MAX, usize::MAX);
        assert_eq!(write_gather(&mut w, &p, 0).unwrap(), 256);
        assert_eq!(w.got, bytes);
    }

    #[test]
    fn broken_writer_is_an_error() {
        let p = Pieces::new([b"abc", &[], &[]], &[]);
        let mut w = Scripted::new(10, 10);
        w.broken = true;
        assert!(write_gather(&mut w, &p, 0).is_err());
    }

    proptest! {
        /// Whatever the writer takes, what it got plus what was queued is the packet, in
        /// order, and flushing the queue later completes it.
        #[test]
        fn written_then_queued_is_the_whole_packet(
            lens in proptest::collection::vec(0usize..200, 0..10),
            per_call in 1usize..300,
            room in 0usize..1500,
        ) {
            let data: Vec<Vec<u8>> = lens
                .iter()
                .enumerate()
                .map(|(i, &l)| (0..l).map(|j| (i * 31 + j) as u8).collect())
                .collect();
            let tail: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let p = Pieces::new([b"HEADER", b"", b"m"], &tail);
            let mut whole = Vec::new();
            p.copy_from(0, &mut whole);
            let mut w = Scripted::new(per_call, room);
            let n = write_gather(&mut w, &p, 0).unwrap();
            prop_assert_eq!(&w.got[..], &whole[..n]);
            let mut q = TxQueue::default();
            q.push(&p, n);
            prop_assert_eq!(q.len(), whole.len() - n);
            w.room = usize::MAX;
            q.flush(&mut w).unwrap();
            prop_assert!(q.is_empty());
            prop_assert_eq!(w.got, whole);
        }
    }
}
