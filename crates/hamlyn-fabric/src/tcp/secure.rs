//! An authenticated, encrypted link: the Noise protocol (`snow`) over one TCP
//! connection, sans-IO.
//!
//! The pattern is `Noise_XXpsk0_25519_AESGCM_BLAKE2s` (or `..._ChaChaPoly_...`: the
//! dialer's [`Cipher`]; an acceptor tries the first message under both): the cluster
//! secret is the pre-shared key, mixed in before the first message, and each end proves
//! its node's static key ([`NodeKey`]) too, so a link is bound both to the cluster and
//! to the static public key of each end ([`Link::remote_key`], which the fabric checks
//! against the node id the other end declares). Three messages, each behind a
//! big-endian `u16` length, each carrying [`HANDSHAKE_PAYLOAD`] (authenticated; it names
//! the protocol):
//!
//! 1. dialer → acceptor, 64 bytes: its ephemeral key, the payload and its tag, under a
//!    key derived from the secret alone. A listener checks it with a hash and a tag,
//!    no Diffie-Hellman: a stranger without the secret costs it nothing more.
//! 2. acceptor → dialer, 112 bytes: its ephemeral key, its static key encrypted, the
//!    payload (`ee`, `es`).
//! 3. dialer → acceptor, 80 bytes: its static key encrypted, the payload (`se`). The
//!    dialer sends its first record (its HELLO) right behind it, so a session still
//!    takes two round trips.
//!
//! A message whose length is not its step's ([`HANDSHAKE_LENS`]) is refused before any
//! cryptography. The 66 bytes of the first message make a `danger_insecure` acceptor,
//! which reads a 64-byte header, refuse it at once (bad magic) instead of waiting for
//! its handshake timeout.
//!
//! After the handshake every byte of the fabric's frame stream travels in *records*: a
//! big-endian `u16` length, then at most 65,535 bytes of AES-256-GCM (or
//! ChaCha20-Poly1305) ciphertext with its 16-byte tag, each direction numbering its
//! records with its own counter nonce. A record that does not authenticate (altered,
//! injected, replayed, reordered or sealed under another key) is a
//! [`LinkError::BadRecord`]; the fabric closes the connection. Records do not follow
//! frame boundaries: they cut the plaintext stream wherever a write ends or 65,519 bytes
//! are reached, and the frame decoder runs on what they open. Records are sealed and
//! opened where they lie (`record.rs`: Noise's transport on the handshake's split keys,
//! with ring): [`Link::seal_onto`] gathers plaintext into the send queue and seals it
//! there, [`Link::open_next`] opens a record in the buffer it was read into.
//!
//! A replayed handshake gets nowhere: the acceptor answers it with a new ephemeral key,
//! and the third message needs the original dialer's ephemeral and static private keys.
//! The node id, incarnation and session a dialer declares travel in a record (the HELLO
//! frame), never in the handshake's own messages. A [`ReplayGuard`] shared by a
//! listener's links refuses a first message whose ephemeral key it has seen already,
//! before the acceptor makes a key or computes anything for it: replaying a recorded
//! handshake cannot make a node spend its Diffie-Hellman on the replayer.

use std::collections::{HashSet, VecDeque};

use hamlyn_core::Instant;
use snow::HandshakeState;

use super::node_key::{NodeKey, PublicKey, KEY_LEN};
use super::record::Records;
use super::secret::ClusterSecret;
use super::tx::Pieces;
use crate::fabric::SharedBytes;

/// The Noise protocol name of the default cipher ([`Cipher::Aes256Gcm`]).
pub const NOISE_PARAMS: &str = Cipher::Aes256Gcm.noise_params();

/// The cipher of a link's records (and of its handshake's encrypted parts): a dialer
/// proposes its own ([`crate::tcp::TcpConfig::cipher`]), an acceptor takes either, so
/// nodes configured differently still talk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cipher {
    /// AES-256-GCM (ring's: AES-NI and carry-less multiplication, VAES where the CPU
    /// has it). About 10.5 GB/s on one core of the development machine (2026-11-25),
    /// 4.3 times ChaCha20-Poly1305: the default.
    #[default]
    Aes256Gcm,
    /// ChaCha20-Poly1305: for CPUs without AES instructions, where AES-GCM is slow.
    ChaCha20Poly1305,
}

impl Cipher {
    /// Both ciphers, the default first (the order an acceptor tries them in).
    pub const ALL: [Cipher; 2] = [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305];

    /// The Noise protocol name of links with this cipher.
    pub const fn noise_params(self) -> &'static str {
        match self {
            Cipher::Aes256Gcm => "Noise_XXpsk0_25519_AESGCM_BLAKE2s",
            Cipher::ChaCha20Poly1305 => "Noise_XXpsk0_25519_ChaChaPoly_BLAKE2s",
        }
    }

    /// The cipher's name, as `--cipher` takes it: `aes-256-gcm` or `chacha20-poly1305`.
    pub const fn name(self) -> &'static str {
        match self {
            Cipher::Aes256Gcm => "aes-256-gcm",
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }
}

impl std::fmt::Display for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Cipher {
    type Err = String;

    /// `aes-256-gcm` or `chacha20-poly1305`.
    fn from_str(s: &str) -> Result<Cipher, String> {
        Cipher::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("no cipher {s:?}: aes-256-gcm or chacha20-poly1305"))
    }
}

/// Bound into the handshake hash: both ends must speak this protocol.
const PROLOGUE: &[u8] = b"hamlyn tcp fabric, records v2";

/// What each handshake message carries (authenticated; it names the protocol again).
pub const HANDSHAKE_PAYLOAD: [u8; 16] = *b"hamlyn tcp v2\0\0\0";

/// Bytes of the payload with its tag.
const SEALED_PAYLOAD: usize = HANDSHAKE_PAYLOAD.len() + TAG_LEN;

/// Bytes of each handshake message, in order: the dialer's ephemeral key and the
/// payload; the acceptor's ephemeral key, its static key sealed and the payload; the
/// dialer's static key sealed and the payload.
pub const HANDSHAKE_LENS: [usize; 3] = [
    KEY_LEN + SEALED_PAYLOAD,
    KEY_LEN + KEY_LEN + TAG_LEN + SEALED_PAYLOAD,
    KEY_LEN + TAG_LEN + SEALED_PAYLOAD,
];

/// Bytes of the first handshake message (what a stranger may send a listener).
pub const HANDSHAKE_LEN: usize = HANDSHAKE_LENS[0];

/// Bytes of the longest handshake message.
const MAX_HANDSHAKE_LEN: usize = HANDSHAKE_LENS[1];

/// Bytes of a record's length prefix.
pub const LEN_PREFIX: usize = 2;

/// Bytes of an authentication tag.
pub const TAG_LEN: usize = 16;

/// Longest record (ciphertext and tag): Noise's message limit.
pub const MAX_RECORD: usize = 65_535;

/// Most plaintext bytes in one record.
pub const MAX_PLAIN: usize = MAX_RECORD - TAG_LEN;

/// Bytes of ciphertext a link buffers once secured: two of the longest records with
/// their prefixes. Until then it holds one handshake message: a stranger who opens
/// connections and never completes a handshake costs little each.
const INBUF_LEN: usize = 2 * (LEN_PREFIX + MAX_RECORD);

/// Why a link failed. Any of them closes the connection.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkError {
    /// A handshake message has the wrong length (not a Hamlyn secure link of this
    /// version, e.g. a `--danger-insecure` node's plain HELLO).
    #[error("handshake message of {0} bytes, not {HANDSHAKE_LENS:?}'s")]
    HandshakeLength(usize),
    /// A handshake message did not authenticate: the peer does not hold the cluster
    /// secret or the private half of the static key it showed, or the message was
    /// altered.
    #[error("handshake refused: {0}")]
    Handshake(String),
    /// A record's length is impossible (shorter than a tag with one byte).
    #[error("record of {0} bytes")]
    RecordLength(usize),
    /// A record did not authenticate (altered, injected, replayed or out of order).
    #[error("record does not authenticate")]
    BadRecord,
    /// A first handshake message that authenticated but carries an ephemeral key the
    /// listener has seen before: a recorded handshake, replayed.
    #[error("replayed handshake (an ephemeral key seen before)")]
    ReplayedHandshake,
    /// A frame was to be sealed before the handshake completed, or after a failure.
    #[error("link not established")]
    NotEstablished,
    /// The Noise library refused to set up or seal.
    #[error("noise: {0}")]
    Noise(String),
    /// One direction of the link sealed or opened 2^64 - 1 records: its counter is
    /// used up (Noise never reuses a nonce), so the connection must be made anew.
    #[error("the link's record counter is used up")]
    Exhausted,
}

/// The ephemeral keys of the last first-handshake-messages a listener accepted, to
/// refuse one that comes again (bounded: the oldest is forgotten first).
#[derive(Debug)]
pub struct ReplayGuard {
    seen: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
    cap: usize,
}

impl ReplayGuard {
    /// A guard remembering the last `cap` keys (at least 1).
    pub fn new(cap: usize) -> ReplayGuard {
        ReplayGuard {
            seen: HashSet::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// Whether `key` is new (and remembers it).
    pub fn fresh(&mut self, key: [u8; 32]) -> bool {
        if !self.seen.insert(key) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }
}

/// What [`Link::open`] produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// No complete message is buffered: read more.
    NeedMore,
    /// This many plaintext bytes: written at the start of the output ([`Link::open`]),
    /// or opened where they lie, at [`Link::plain`] ([`Link::open_next`]).
    Plain(usize),
    /// An acceptor read the first handshake message: send
    /// [`Link::take_handshake_out`] (the second) and wait for the third.
    Reply,
    /// The handshake just completed. A dialer must send [`Link::take_handshake_out`]
    /// (the third message) first, then its HELLO; an acceptor has nothing to send.
    /// [`Link::remote_key`] names the other end's static key.
    Secured,
}

enum State {
    Handshake(Box<HandshakeState>),
    Transport(Box<Records>),
    Failed,
}

/// One connection's Noise state, its received ciphertext and its sealing buffers.
pub struct Link {
    state: State,
    /// The cipher of `state` (an acceptor's until the first message chose: its first
    /// try).
    cipher: Cipher,
    /// An acceptor's handshake with the other cipher, tried if the first message does
    /// not authenticate under `state`'s; dropped once one did.
    other: Option<(Cipher, Box<HandshakeState>)>,
    dialer: bool,
    /// Index in [`HANDSHAKE_LENS`] of the next handshake message to read.
    expect: usize,
    /// The handshake message to send next (prefixed), until taken.
    hs_out: Vec<u8>,
    /// The other end's static key, once the handshake showed it.
    remote: Option<PublicKey>,
    /// Bytes read: handshake messages, or records (the one at `plain` opened in place).
    inbuf: Box<[u8]>,
    /// Start of the first byte not yet opened (a message's length prefix).
    in_start: usize,
    /// End of the bytes read.
    in_end: usize,
    /// The opened plaintext of the last record, where it lies in `inbuf`, not yet
    /// consumed (empty: open the next record).
    plain: std::ops::Range<usize>,
    /// Sealed bytes of [`Link::seal_bytes`] (the fabric seals into its send queue).
    sealed: Vec<u8>,
    /// Why opening failed, when [`Link::open`] handed out plaintext first: its next
    /// answer.
    failed_with: Option<LinkError>,
    /// Plaintext of small frames held to share one record (and one write) with the
    /// frames after them; sealed, in front of them, by the next [`Link::seal_onto`].
    held: Vec<u8>,
    /// When the first held frame was held.
    held_since: Option<Instant>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("dialer", &self.dialer)
            .field("secured", &self.is_secured())
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

/// Length of the message at the start of `buffered`, prefix included, once the prefix
/// is in.
fn message_len(buffered: &[u8]) -> Option<usize> {
    match buffered {
        [hi, lo, ..] => Some(LEN_PREFIX + usize::from(u16::from_be_bytes([*hi, *lo]))),
        _ => None,
    }
}

fn noise(e: snow::Error) -> LinkError {
    LinkError::Noise(e.to_string())
}

/// A handshake with `cipher`, proving `key`, bound to `secret`.
fn handshake(
    secret: &ClusterSecret,
    key: &NodeKey,
    cipher: Cipher,
    dialer: bool,
) -> Result<Box<HandshakeState>, LinkError> {
    let params = cipher.noise_params().parse().map_err(noise)?;
    let b = snow::Builder::new(params)
        .psk(0, secret.as_bytes())
        .map_err(noise)?
        .local_private_key(key.private())
        .map_err(noise)?
        .prologue(PROLOGUE)
        .map_err(noise)?;
    let hs = if dialer {
        b.build_initiator()
    } else {
        b.build_responder()
    }
    .map_err(noise)?;
    Ok(Box::new(hs))
}

impl Link {
    fn build(
        secret: &ClusterSecret,
        key: &NodeKey,
        dialer: bool,
        cipher: Cipher,
    ) -> Result<Link, LinkError> {
        let hs = handshake(secret, key, cipher, dialer)?;
        let other = if dialer {
            None
        } else {
            let c = Cipher::ALL.into_iter().find(|&c| c != cipher);
            c.map(|c| Ok::<_, LinkError>((c, handshake(secret, key, c, false)?)))
                .transpose()?
        };
        Ok(Link {
            state: State::Handshake(hs),
            cipher,
            other,
            dialer,
            expect: usize::from(dialer),
            hs_out: Vec::new(),
            remote: None,
            inbuf: vec![0; LEN_PREFIX + MAX_HANDSHAKE_LEN].into_boxed_slice(),
            in_start: 0,
            in_end: 0,
            plain: 0..0,
            sealed: Vec::new(),
            failed_with: None,
            held: Vec::new(),
            held_since: None,
        })
    }

    /// The dialer's side, proving `key`, and the first handshake message to send (with
    /// its prefix), with the default cipher.
    pub fn dialer(secret: &ClusterSecret, key: &NodeKey) -> Result<(Link, Vec<u8>), LinkError> {
        Link::dialer_with(secret, key, Cipher::default())
    }

    /// [`Link::dialer`] with records in `cipher`.
    pub fn dialer_with(
        secret: &ClusterSecret,
        key: &NodeKey,
        cipher: Cipher,
    ) -> Result<(Link, Vec<u8>), LinkError> {
        let mut link = Link::build(secret, key, true, cipher)?;
        let State::Handshake(hs) = &mut link.state else {
            return Err(LinkError::NotEstablished);
        };
        let mut msg = vec![0u8; LEN_PREFIX + HANDSHAKE_LEN];
        let n = hs
            .write_message(&HANDSHAKE_PAYLOAD, &mut msg[LEN_PREFIX..])
            .map_err(noise)?;
        if n != HANDSHAKE_LEN {
            return Err(LinkError::HandshakeLength(n));
        }
        msg[..LEN_PREFIX].copy_from_slice(&(n as u16).to_be_bytes());
        Ok((link, msg))
    }

    /// The acceptor's side, proving `key`: waits for the dialer's first message, in
    /// either cipher (the dialer's choice).
    pub fn acceptor(secret: &ClusterSecret, key: &NodeKey) -> Result<Link, LinkError> {
        Link::build(secret, key, false, Cipher::default())
    }

    /// The cipher of the link's records: a dialer's own; an acceptor's once the first
    /// handshake message authenticated under it.
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// The other end's static public key, once the handshake completed (what the
    /// fabric binds to the node id the other end declares).
    pub fn remote_key(&self) -> Option<PublicKey> {
        self.remote
    }

    /// The handshake message to send now (prefixed; empty if none), taken: after
    /// [`Opened::Reply`] (an acceptor's second message) and after [`Opened::Secured`]
    /// (a dialer's third).
    pub fn take_handshake_out(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.hs_out)
    }

    /// Whether the handshake completed.
    pub fn is_secured(&self) -> bool {
        matches!(self.state, State::Transport(_))
    }

    /// Whether opened plaintext waits, or a whole message (handshake message or
    /// record) in the buffer.
    pub fn has_message(&self) -> bool {
        !self.plain.is_empty() || self.message_len().is_some_and(|n| self.buffered() >= n)
    }

    /// Whether part of a message is buffered (the stream would end inside it).
    pub fn partial(&self) -> bool {
        self.buffered() > 0
    }

    fn buffered(&self) -> usize {
        self.in_end - self.in_start
    }

    /// Length of the buffered message with its prefix, once the prefix is in.
    fn message_len(&self) -> Option<usize> {
        message_len(&self.inbuf[self.in_start..self.in_end])
    }

    /// Free space to read ciphertext into (at least one longest record's worth once
    /// [`Link::open`] said [`Opened::NeedMore`]). Bytes move to make room only while
    /// no opened plaintext waits at [`Link::plain`].
    pub fn read_buf(&mut self) -> &mut [u8] {
        if !self.plain.is_empty() {
            // The plaintext lies before `in_start`: nothing moves.
        } else if self.in_start == self.in_end {
            self.in_start = 0;
            self.in_end = 0;
        } else if self.in_start > 0 && self.inbuf.len() - self.in_end < LEN_PREFIX + MAX_RECORD {
            self.inbuf.copy_within(self.in_start..self.in_end, 0);
            self.in_end -= self.in_start;
            self.in_start = 0;
        }
        &mut self.inbuf[self.in_end..]
    }

    /// `n` bytes were read into [`Link::read_buf`].
    pub fn filled(&mut self, n: usize) {
        self.in_end = (self.in_end + n).min(self.inbuf.len());
    }

    /// Appends ciphertext (tests and fuzzing; the fabric reads into
    /// [`Link::read_buf`]). Returns how many bytes fit.
    pub fn push(&mut self, bytes: &[u8]) -> usize {
        let buf = self.read_buf();
        let n = buf.len().min(bytes.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        self.filled(n);
        n
    }

    /// Processes buffered messages: during the handshake, the next handshake message;
    /// after it, the buffered records' plaintext, copied into `out` as far as it fits
    /// (what does not fit stays for the next call). [`Link::open_next`] opens without
    /// the copy.
    pub fn open(&mut self, out: &mut [u8]) -> Result<Opened, LinkError> {
        self.open_guarded(out, None)
    }

    /// [`Link::open`], with an acceptor's first handshake message checked against
    /// `guard` (after it authenticated, before the reply is made).
    pub fn open_guarded(
        &mut self,
        out: &mut [u8],
        mut guard: Option<&mut ReplayGuard>,
    ) -> Result<Opened, LinkError> {
        let mut produced = 0;
        loop {
            match self.open_next(guard.as_deref_mut()) {
                Ok(Opened::Plain(_)) => {
                    let plain = self.plain();
                    let n = plain.len().min(out.len() - produced);
                    if n == 0 {
                        // `out` is full (or empty): the rest waits for the next call.
                        break;
                    }
                    out[produced..produced + n].copy_from_slice(&plain[..n]);
                    self.consume_plain(n);
                    produced += n;
                }
                // What opened before it is handed out first (a HELLO is handled as a
                // HELLO); the failure is the next call's answer.
                Err(e) if produced > 0 => {
                    self.failed_with = Some(e);
                    break;
                }
                Ok(Opened::NeedMore) if produced > 0 => break,
                other => return other,
            }
        }
        Ok(if produced == 0 {
            Opened::NeedMore
        } else {
            Opened::Plain(produced)
        })
    }

    /// Processes the next buffered message: during the handshake, a handshake message;
    /// after it, the next whole record, opened where it lies: [`Opened::Plain`] says
    /// how many bytes wait at [`Link::plain`] (the opened record's plaintext not yet
    /// consumed; nothing new is opened until they are). `guard` checks an acceptor's
    /// first handshake message (after it authenticated, before the reply is made).
    pub fn open_next(&mut self, guard: Option<&mut ReplayGuard>) -> Result<Opened, LinkError> {
        if !self.plain.is_empty() {
            return Ok(Opened::Plain(self.plain.len()));
        }
        match self.open_inner(guard) {
            Ok(o) => Ok(o),
            Err(e) => {
                self.state = State::Failed;
                Err(e)
            }
        }
    }

    /// Opened plaintext not yet consumed (see [`Link::open_next`]).
    pub fn plain(&self) -> &[u8] {
        &self.inbuf[self.plain.clone()]
    }

    /// The first `n` bytes of [`Link::plain`] were used.
    pub fn consume_plain(&mut self, n: usize) {
        self.plain.start = (self.plain.start + n).min(self.plain.end);
    }

    fn open_inner(&mut self, guard: Option<&mut ReplayGuard>) -> Result<Opened, LinkError> {
        match &mut self.state {
            State::Failed => Err(self.failed_with.take().unwrap_or(LinkError::NotEstablished)),
            State::Handshake(hs) => {
                let Some(len) = message_len(&self.inbuf[self.in_start..self.in_end]) else {
                    return Ok(Opened::NeedMore);
                };
                let want = HANDSHAKE_LENS.get(self.expect).copied().unwrap_or(0);
                if len != LEN_PREFIX + want {
                    return Err(LinkError::HandshakeLength(len - LEN_PREFIX));
                }
                if self.in_end - self.in_start < len {
                    return Ok(Opened::NeedMore);
                }
                let msg = &self.inbuf[self.in_start + LEN_PREFIX..self.in_start + len];
                let mut payload = [0u8; MAX_HANDSHAKE_LEN];
                let mut read = hs.read_message(msg, &mut payload);
                // An acceptor's first message may be in the other cipher: that
                // handshake reads it instead (a hash and a tag, no Diffie-Hellman).
                if read.is_err() {
                    if let Some((cipher, mut other)) = self.other.take() {
                        if let Ok(n) = other.read_message(msg, &mut payload) {
                            *hs = other;
                            self.cipher = cipher;
                            read = Ok(n);
                        }
                    }
                }
                self.other = None;
                let n = read.map_err(|e| LinkError::Handshake(e.to_string()))?;
                if payload.get(..n) != Some(&HANDSHAKE_PAYLOAD[..]) {
                    return Err(LinkError::Handshake("another protocol's payload".into()));
                }
                // The dialer's ephemeral key: the first message's first 32 bytes, in
                // clear; checked before the acceptor computes anything for it.
                if let (0, Some(guard), Some(e)) = (self.expect, guard, msg.first_chunk::<32>()) {
                    if !guard.fresh(*e) {
                        return Err(LinkError::ReplayedHandshake);
                    }
                }
                self.in_start += len;
                if !hs.is_handshake_finished() {
                    // Our turn: the acceptor's second message, or the dialer's third.
                    let next = self.expect + 1;
                    let want = HANDSHAKE_LENS.get(next).copied().unwrap_or(0);
                    let mut out = vec![0u8; LEN_PREFIX + want];
                    let n = hs
                        .write_message(&HANDSHAKE_PAYLOAD, &mut out[LEN_PREFIX..])
                        .map_err(noise)?;
                    if n != want {
                        return Err(LinkError::HandshakeLength(n));
                    }
                    out[..LEN_PREFIX].copy_from_slice(&(n as u16).to_be_bytes());
                    self.hs_out = out;
                    self.expect = next + 1;
                }
                if !hs.is_handshake_finished() {
                    return Ok(Opened::Reply);
                }
                let remote = hs
                    .get_remote_static()
                    .and_then(|k| <[u8; KEY_LEN]>::try_from(k).ok())
                    .ok_or_else(|| LinkError::Handshake("no static key".into()))?;
                self.remote = Some(PublicKey::from_bytes(remote));
                // Noise's split: the transport's two keys, sealed and opened with ring
                // in place (`record.rs`) instead of through snow's copying transport.
                let keys = hs.dangerously_get_raw_split();
                let records = Records::from_split(self.cipher, &keys, hs.is_initiator())?;
                self.state = State::Transport(Box::new(records));
                let mut inbuf = vec![0; INBUF_LEN].into_boxed_slice();
                let left = self.in_end - self.in_start;
                inbuf[..left].copy_from_slice(&self.inbuf[self.in_start..self.in_end]);
                self.inbuf = inbuf;
                (self.in_start, self.in_end) = (0, left);
                Ok(Opened::Secured)
            }
            State::Transport(records) => {
                let Some(len) = message_len(&self.inbuf[self.in_start..self.in_end]) else {
                    return Ok(Opened::NeedMore);
                };
                let body = len - LEN_PREFIX;
                if body <= TAG_LEN {
                    return Err(LinkError::RecordLength(body));
                }
                if self.in_end - self.in_start < len {
                    return Ok(Opened::NeedMore);
                }
                let at = self.in_start + LEN_PREFIX;
                let n = records.recv.open_in_place(&mut self.inbuf[at..at + body])?;
                self.in_start += len;
                self.plain = at..at + n;
                Ok(Opened::Plain(n))
            }
        }
    }

    /// Holds a small frame's plaintext (a copy) to be sealed with the frames after it
    /// in one record: a record per 8-byte message would cost a tag and a cipher call
    /// each. The next [`Link::seal_onto`] seals it first.
    pub(crate) fn hold(&mut self, pieces: &Pieces<'_>, now: Instant) {
        pieces.copy_from(0, &mut self.held);
        self.held_since.get_or_insert(now);
    }

    /// Plaintext bytes held.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    /// Since when frames are held (`None`: nothing is).
    pub(crate) fn held_since(&self) -> Option<Instant> {
        self.held_since
    }

    /// Seals what is held, then `pieces`, into records appended to `out` (the fabric's
    /// send queue): each record's plaintext is gathered into `out` (the one copy of a
    /// client's bytes) and sealed where it lies. Returns the bytes appended; on an
    /// error `out` is as it was. A steady stream reuses `out`'s memory.
    pub(crate) fn seal_onto(
        &mut self,
        pieces: &Pieces<'_>,
        out: &mut Vec<u8>,
    ) -> Result<usize, LinkError> {
        let start = out.len();
        match self.seal_records(pieces, out) {
            Ok(()) => {
                self.held.clear();
                self.held_since = None;
                Ok(out.len() - start)
            }
            Err(e) => {
                out.truncate(start);
                Err(e)
            }
        }
    }

    fn seal_records(&mut self, pieces: &Pieces<'_>, out: &mut Vec<u8>) -> Result<(), LinkError> {
        let State::Transport(records) = &mut self.state else {
            return Err(LinkError::NotEstablished);
        };
        let first = SharedBytes::from(&self.held[..]);
        let mut pieces = std::iter::once(first)
            .filter(|p| !p.is_empty())
            .chain(pieces.iter());
        let mut current = pieces.next();
        while current.is_some() {
            // A length prefix, up to one record's plaintext behind it, sealed in place,
            // its tag, then the prefix filled in.
            let at = out.len();
            out.extend_from_slice(&[0; LEN_PREFIX]);
            let mut plain = 0;
            while plain < MAX_PLAIN {
                let Some(p) = current else {
                    break;
                };
                let take = p.len().min(MAX_PLAIN - plain);
                p.head(take).append_to(out);
                plain += take;
                current = if take == p.len() {
                    pieces.next()
                } else {
                    Some(p.tail(take))
                };
            }
            if plain == 0 {
                // Only empty pieces were left.
                out.truncate(at);
                break;
            }
            let tag = records.send.seal_in_place(&mut out[at + LEN_PREFIX..])?;
            out.extend_from_slice(&tag);
            let body = (plain + TAG_LEN) as u16;
            out[at..at + LEN_PREFIX].copy_from_slice(&body.to_be_bytes());
        }
        Ok(())
    }

    /// Seals what is held, then plain `bytes` (tests and fuzzing; the fabric seals
    /// into its send queue): the records, valid until the next call.
    pub fn seal_bytes(&mut self, bytes: &[u8]) -> Result<&[u8], LinkError> {
        let mut sealed = std::mem::take(&mut self.sealed);
        sealed.clear();
        let r = self.seal_onto(&Pieces::new([bytes, &[], &[]], &[]), &mut sealed);
        self.sealed = sealed;
        r.map(|_| &self.sealed[..])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Runs the three handshake messages between a dialer proving `dk` and an acceptor
    /// proving `ak`, under secrets `a` and `b`.
    fn pair_keys(
        a: &ClusterSecret,
        dk: &NodeKey,
        b: &ClusterSecret,
        ak: &NodeKey,
    ) -> Result<(Link, Link), LinkError> {
        let (mut d, first) = Link::dialer(a, dk)?;
        let mut acc = Link::acceptor(b, ak)?;
        acc.push(&first);
        let mut out = vec![0; MAX_PLAIN];
        assert_eq!(acc.open(&mut out)?, Opened::Reply);
        d.push(&acc.take_handshake_out());
        assert_eq!(d.open(&mut out)?, Opened::Secured);
        acc.push(&d.take_handshake_out());
        assert_eq!(acc.open(&mut out)?, Opened::Secured);
        Ok((d, acc))
    }

    fn pair(a: &ClusterSecret, b: &ClusterSecret) -> Result<(Link, Link), LinkError> {
        pair_keys(a, &key(1), b, &key(2))
    }

    fn secret(b: u8) -> ClusterSecret {
        ClusterSecret::from_bytes([b; 32])
    }

    fn key(b: u8) -> NodeKey {
        NodeKey::from_private([b; 32]).unwrap()
    }

    /// A dialer of either cipher is accepted by an acceptor (which knows no preference),
    /// both ends then seal in the dialer's cipher, and each cipher's records open only
    /// under it.
    #[test]
    fn the_dialer_chooses_the_cipher_and_the_acceptor_takes_either() {
        let mut records = Vec::new();
        for cipher in Cipher::ALL {
            let (mut d, first) = Link::dialer_with(&secret(7), &key(1), cipher).unwrap();
            let mut acc = Link::acceptor(&secret(7), &key(2)).unwrap();
            acc.push(&first);
            let mut out = vec![0; MAX_PLAIN];
            assert_eq!(acc.open(&mut out).unwrap(), Opened::Reply, "{cipher}");
            d.push(&acc.take_handshake_out());
            assert_eq!(d.open(&mut out).unwrap(), Opened::Secured);
            acc.push(&d.take_handshake_out());
            assert_eq!(acc.open(&mut out).unwrap(), Opened::Secured);
            assert_eq!((d.cipher(), acc.cipher()), (cipher, cipher));
            let sealed = d.seal_bytes(b"either way").unwrap().to_vec();
            acc.push(&sealed);
            assert_eq!(acc.open(&mut out).unwrap(), Opened::Plain(10), "{cipher}");
            assert_eq!(&out[..10], b"either way");
            let back = acc.seal_bytes(b"and back").unwrap().to_vec();
            d.push(&back);
            assert_eq!(d.open(&mut out).unwrap(), Opened::Plain(8));
            records.push(sealed);
        }
        // The two ciphers' first records differ: the names are not aliases.
        assert_ne!(records[0], records[1]);
        // A wrong secret is still refused whichever cipher the acceptor tries.
        for cipher in Cipher::ALL {
            let (_, first) = Link::dialer_with(&secret(7), &key(1), cipher).unwrap();
            let mut acc = Link::acceptor(&secret(8), &key(2)).unwrap();
            acc.push(&first);
            let mut out = vec![0; MAX_PLAIN];
            assert!(matches!(acc.open(&mut out), Err(LinkError::Handshake(_))));
        }
        assert_eq!("chacha20-poly1305".parse(), Ok(Cipher::ChaCha20Poly1305));
        assert_eq!(Cipher::Aes256Gcm.to_string().parse(), Ok(Cipher::Aes256Gcm));
        assert!("rot13".parse::<Cipher>().is_err());
    }

    #[test]
    fn each_end_learns_the_others_static_key_and_lengths_are_fixed() {
        let (dk, ak) = (key(1), key(2));
        let (mut d, first) = Link::dialer(&secret(1), &dk).unwrap();
        assert_eq!(first.len(), LEN_PREFIX + HANDSHAKE_LENS[0]);
        let mut acc = Link::acceptor(&secret(1), &ak).unwrap();
        acc.push(&first);
        let mut out = vec![0; MAX_PLAIN];
        assert_eq!(acc.open(&mut out), Ok(Opened::Reply));
        assert_eq!(acc.remote_key(), None, "not before the third message");
        let second = acc.take_handshake_out();
        assert_eq!(second.len(), LEN_PREFIX + HANDSHAKE_LENS[1]);
        assert!(acc.take_handshake_out().is_empty(), "taken once");
        d.push(&second);
        assert_eq!(d.open(&mut out), Ok(Opened::Secured));
        assert_eq!(d.remote_key(), Some(ak.public()));
        let third = d.take_handshake_out();
        assert_eq!(third.len(), LEN_PREFIX + HANDSHAKE_LENS[2]);
        // The third message and the first record in one write.
        let mut wire = third;
        wire.extend_from_slice(d.seal_bytes(b"HELLO").unwrap());
        acc.push(&wire);
        assert_eq!(acc.open(&mut out), Ok(Opened::Secured));
        assert_eq!(acc.remote_key(), Some(dk.public()));
        assert!(acc.take_handshake_out().is_empty());
        assert_eq!(acc.open(&mut out), Ok(Opened::Plain(5)));
        assert_eq!(&out[..5], b"HELLO");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Frames of any number of pieces (the fabric's header, metadata and payload
        /// slices), some held first, sealed onto a queue that already holds bytes, then
        /// read by the other end in any cut and opened in place, a record at a time:
        /// what opens is the frames' bytes in order, each record at most
        /// [`MAX_PLAIN`] of plaintext, and the queue's earlier bytes are untouched.
        #[test]
        fn sealed_pieces_open_in_place_whatever_the_cuts(
            frames in proptest::collection::vec(
                (proptest::collection::vec(0usize..90_000, 1..5), proptest::prelude::any::<bool>()),
                1..5,
            ),
            cut in 1usize..70_000,
            held_cipher in proptest::prelude::any::<bool>(),
        ) {
            let cipher = if held_cipher { Cipher::ChaCha20Poly1305 } else { Cipher::Aes256Gcm };
            let (mut d, mut a) = pair_with(cipher);
            let mut queue = b"queued before".to_vec();
            let mut expect = Vec::new();
            for (k, (lens, hold)) in frames.iter().enumerate() {
                let bufs: Vec<Vec<u8>> = lens
                    .iter()
                    .enumerate()
                    .map(|(j, &n)| (0..n).map(|i| (i * 31 + j * 7 + k) as u8).collect())
                    .collect();
                let tail: Vec<SharedBytes<'_>> =
                    bufs.iter().skip(1).map(SharedBytes::from).collect();
                let pieces = Pieces::new([&bufs[0], b"", b""], &tail);
                for b in &bufs {
                    expect.extend_from_slice(b);
                }
                if *hold {
                    d.hold(&pieces, Instant(k as u64));
                } else {
                    let before = queue.len();
                    let n = d.seal_onto(&pieces, &mut queue).unwrap();
                    proptest::prop_assert_eq!(queue.len(), before + n);
                    proptest::prop_assert_eq!(d.held(), 0);
                }
            }
            d.seal_onto(&Pieces::new([b"", b"", b""], &[]), &mut queue).unwrap();
            proptest::prop_assert_eq!(&queue[..13], b"queued before");
            let mut got = Vec::new();
            for chunk in queue[13..].chunks(cut) {
                let mut rest = chunk;
                while !rest.is_empty() {
                    let n = a.push(rest);
                    rest = &rest[n..];
                    loop {
                        match a.open_next(None).unwrap() {
                            Opened::Plain(n) => {
                                proptest::prop_assert!(n <= MAX_PLAIN);
                                got.extend_from_slice(a.plain());
                                a.consume_plain(n);
                            }
                            Opened::NeedMore => break,
                            other => unreachable!("{other:?}"),
                        }
                    }
                }
            }
            proptest::prop_assert!(!a.partial());
            proptest::prop_assert_eq!(got, expect);
        }
    }

    fn pair_with(cipher: Cipher) -> (Link, Link) {
        let (mut d, first) = Link::dialer_with(&secret(4), &key(1), cipher).unwrap();
        let mut a = Link::acceptor(&secret(4), &key(2)).unwrap();
        let mut out = vec![0; 256];
        a.push(&first);
        assert_eq!(a.open(&mut out), Ok(Opened::Reply));
        d.push(&a.take_handshake_out());
        assert_eq!(d.open(&mut out), Ok(Opened::Secured));
        a.push(&d.take_handshake_out());
        assert_eq!(a.open(&mut out), Ok(Opened::Secured));
        (d, a)
    }

    /// The handshake runs whatever the output buffer: it writes none of it.
    #[test]
    fn an_empty_output_buffer_still_runs_the_handshake() {
        let (mut d, first) = Link::dialer(&secret(6), &key(1)).unwrap();
        let mut a = Link::acceptor(&secret(6), &key(2)).unwrap();
        a.push(&first);
        assert_eq!(a.open(&mut []), Ok(Opened::Reply));
        d.push(&a.take_handshake_out());
        assert_eq!(d.open(&mut []), Ok(Opened::Secured));
        a.push(&d.take_handshake_out());
        assert_eq!(a.open(&mut []), Ok(Opened::Secured));
        a.push(d.seal_bytes(b"kept").unwrap());
        assert_eq!(a.open(&mut []), Ok(Opened::NeedMore), "nothing fits");
        let mut out = [0u8; 8];
        assert_eq!(a.open(&mut out), Ok(Opened::Plain(4)));
        assert_eq!(&out[..4], b"kept");
    }

    #[test]
    fn records_round_trip_in_any_cut() {
        let (mut d, mut a) = pair(&secret(1), &secret(1)).unwrap();
        let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        let mut wire = d.seal_bytes(b"hello").unwrap().to_vec();
        wire.extend_from_slice(d.seal_bytes(&big).unwrap());
        let mut got = Vec::new();
        let mut out = vec![0; MAX_PLAIN + 1];
        for chunk in wire.chunks(1000) {
            assert_eq!(a.push(chunk), chunk.len());
            loop {
                match a.open(&mut out).unwrap() {
                    Opened::Plain(n) => got.extend_from_slice(&out[..n]),
                    Opened::NeedMore => break,
                    other => unreachable!("{other:?}"),
                }
            }
        }
        assert_eq!(&got[..5], b"hello");
        assert_eq!(&got[5..], &big[..]);
        assert!(!a.partial());
    }

    #[test]
    fn held_frames_share_one_record_in_order() {
        let (mut d, mut a) = pair(&secret(9), &secret(9)).unwrap();
        let t = Instant(5);
        for f in [&b"one "[..], b"two ", b"three "] {
            d.hold(&Pieces::new([f, &[], &[]], &[]), t);
        }
        assert_eq!((d.held(), d.held_since()), (14, Some(t)));
        let wire = d.seal_bytes(b"four").unwrap().to_vec();
        assert_eq!(wire.len(), LEN_PREFIX + 18 + TAG_LEN, "one record");
        assert_eq!((d.held(), d.held_since()), (0, None));
        let mut out = vec![0; MAX_PLAIN];
        a.push(&wire);
        assert_eq!(a.open(&mut out), Ok(Opened::Plain(18)));
        assert_eq!(&out[..18], b"one two three four");
    }

    #[test]
    fn wrong_secret_fails_the_handshake() {
        let (_, first) = Link::dialer(&secret(1), &key(1)).unwrap();
        let mut acc = Link::acceptor(&secret(2), &key(2)).unwrap();
        acc.push(&first);
        assert!(matches!(
            acc.open(&mut [0; 64]),
            Err(LinkError::Handshake(_))
        ));
        assert!(acc.take_handshake_out().is_empty(), "nothing made for it");
    }

    /// A third message made with another static private key than the one the dialer
    /// claims cannot be forged: swapping in another dialer's third message fails.
    #[test]
    fn a_third_message_of_another_handshake_fails() {
        let mut out = vec![0; MAX_PLAIN];
        let (mut d1, first1) = Link::dialer(&secret(5), &key(1)).unwrap();
        let mut a1 = Link::acceptor(&secret(5), &key(2)).unwrap();
        a1.push(&first1);
        assert_eq!(a1.open(&mut out), Ok(Opened::Reply));
        d1.push(&a1.take_handshake_out());
        assert_eq!(d1.open(&mut out), Ok(Opened::Secured));
        let (mut d2, first2) = Link::dialer(&secret(5), &key(3)).unwrap();
        let mut a2 = Link::acceptor(&secret(5), &key(2)).unwrap();
        a2.push(&first2);
        assert_eq!(a2.open(&mut out), Ok(Opened::Reply));
        d2.push(&a2.take_handshake_out());
        assert_eq!(d2.open(&mut out), Ok(Opened::Secured));
        a2.push(&d1.take_handshake_out());
        assert!(matches!(a2.open(&mut out), Err(LinkError::Handshake(_))));
        assert_eq!(a2.remote_key(), None);
    }

    #[test]
    fn altered_replayed_and_plain_bytes_are_refused() {
        let (mut d, mut a) = pair(&secret(3), &secret(3)).unwrap();
        let rec = d.seal_bytes(b"a frame").unwrap().to_vec();
        let mut out = vec![0; MAX_PLAIN];
        // One byte altered: refused, and the link stays failed.
        let mut a2 = {
            let (mut d2, mut a2) = pair(&secret(3), &secret(3)).unwrap();
            let r2 = d2.seal_bytes(b"a frame").unwrap().to_vec();
            let mut bad2 = r2.clone();
            bad2[5] ^= 1;
            a2.push(&bad2);
            assert_eq!(a2.open(&mut out), Err(LinkError::BadRecord));
            a2
        };
        assert_eq!(a2.open(&mut out), Err(LinkError::NotEstablished));
        // A good record and an altered one in one buffer: the good one opens, then
        // the altered one fails.
        let (mut d3, mut a3) = pair(&secret(3), &secret(3)).unwrap();
        let mut both = d3.seal_bytes(b"good").unwrap().to_vec();
        let mut bad = d3.seal_bytes(b"altered").unwrap().to_vec();
        bad[4] ^= 1;
        both.extend_from_slice(&bad);
        a3.push(&both);
        assert_eq!(a3.open(&mut out), Ok(Opened::Plain(4)));
        assert_eq!(a3.open(&mut out), Err(LinkError::BadRecord));
        // Replayed: the second copy fails (the nonce moved on).
        a.push(&rec);
        assert_eq!(a.open(&mut out), Ok(Opened::Plain(7)));
        a.push(&rec);
        assert_eq!(a.open(&mut out), Err(LinkError::BadRecord));
        // A plain HELLO where a handshake message belongs.
        let mut acc = Link::acceptor(&secret(3), &key(2)).unwrap();
        acc.push(&[0x48, 0x4d, 1, 7]);
        assert_eq!(acc.open(&mut out), Err(LinkError::HandshakeLength(0x484d)));
        // A second message of the first one's length.
        let (mut d, _) = Link::dialer(&secret(3), &key(1)).unwrap();
        d.push(&[0, 64]);
        assert_eq!(d.open(&mut out), Err(LinkError::HandshakeLength(64)));
    }

    #[test]
    fn a_guard_refuses_a_replayed_first_message_and_forgets_the_oldest() {
        let mut guard = ReplayGuard::new(2);
        let (_, first) = Link::dialer(&secret(4), &key(1)).unwrap();
        let mut out = vec![0; MAX_PLAIN];
        let mut acc = Link::acceptor(&secret(4), &key(2)).unwrap();
        acc.push(&first);
        assert_eq!(
            acc.open_guarded(&mut out, Some(&mut guard)),
            Ok(Opened::Reply)
        );
        let mut again = Link::acceptor(&secret(4), &key(2)).unwrap();
        again.push(&first);
        assert_eq!(
            again.open_guarded(&mut out, Some(&mut guard)),
            Err(LinkError::ReplayedHandshake)
        );
        assert!(again.take_handshake_out().is_empty(), "no reply made");
        assert!(guard.fresh([1; 32]) && guard.fresh([2; 32]));
        assert!(guard.fresh(first[2..34].try_into().unwrap()), "forgotten");
    }

    /// A replayed first message (past the guard's memory) is answered with a new
    /// ephemeral key; the recorded third message and HELLO record then fail.
    #[test]
    fn a_replayed_handshake_yields_other_keys() {
        let (mut d, first) = Link::dialer(&secret(4), &key(1)).unwrap();
        let mut acc = Link::acceptor(&secret(4), &key(2)).unwrap();
        acc.push(&first);
        let mut out = vec![0; MAX_PLAIN];
        assert_eq!(acc.open(&mut out).unwrap(), Opened::Reply);
        d.push(&acc.take_handshake_out());
        assert_eq!(d.open(&mut out).unwrap(), Opened::Secured);
        let mut recorded = d.take_handshake_out();
        recorded.extend_from_slice(d.seal_bytes(b"HELLO from node 1").unwrap());
        // The replayer sends the same first message, then the same third and record.
        let mut victim = Link::acceptor(&secret(4), &key(2)).unwrap();
        victim.push(&first);
        assert_eq!(victim.open(&mut out).unwrap(), Opened::Reply);
        victim.push(&recorded);
        assert!(matches!(
            victim.open(&mut out),
            Err(LinkError::Handshake(_))
        ));
    }
}
