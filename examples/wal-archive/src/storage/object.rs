//! The format of a stored WAL file: zstd, with its checksum inside.
//!
//! Every WAL object is a valid zstd stream (`zstd -d < object > file` gives
//! the WAL file back) made of two frames:
//!
//! 1. a zstd *skippable frame* (magic `0x184D2A5C`, ignored by decoders)
//!    whose payload is a small JSON header:
//!    `{"format":"cnpgi-wal-archive/2","name":"…","size":16777216,"blake3":"…"}`,
//!    the BLAKE3 digest and size being those of the **uncompressed** file;
//! 2. the compressed file, a zstd frame with zstd's own content checksum.
//!
//! Format 1, written before 2026-11-28, is the same with `"sha256"` in place
//! of `"blake3"`; it is still read (and checked with SHA-256). BLAKE3 took its
//! place because the digest is a fifth of the plugin's CPU per segment: on
//! one core BLAKE3 hashes a 16 MiB segment in about 4 ms, SHA-256 (with the
//! CPU's SHA extensions) in about 10 (BENCHMARKS.md), with the same 256-bit
//! collision resistance.
//!
//! Keeping the checksum in the object rather than in object metadata works
//! the same on every store (a local directory has no metadata), and one
//! object is written atomically, so a file and its checksum can never be
//! torn apart. The header is what archive idempotence compares: archiving a
//! name again with the same content succeeds, with another one is refused.
//!
//! ```
//! use cnpgi_wal_archive::storage::object::{decode, encode};
//!
//! let stored = encode("000000010000000000000003", b"wal bytes", 3)?;
//! let (header, content) = decode(&stored, "000000010000000000000003")?;
//! assert_eq!(content, b"wal bytes");
//! assert_eq!(header.size, 9);
//! # Ok::<(), cnpgi_wal_archive::storage::object::ObjectError>(())
//! ```

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The `format` of the header written: the content's digest is BLAKE3.
pub const FORMAT: &str = "cnpgi-wal-archive/2";
/// The `format` of objects written before [`FORMAT`]: the same, with SHA-256.
pub const FORMAT_SHA256: &str = "cnpgi-wal-archive/1";
/// The magic number of the header's skippable frame (little-endian on disk).
const SKIPPABLE_MAGIC: u32 = 0x184D_2A5C;
/// A header is a few hundred bytes; anything larger is not ours.
const MAX_HEADER: usize = 4096;
/// The largest WAL file accepted (PostgreSQL's maximum segment size is 1 GiB).
pub const MAX_CONTENT: u64 = 1024 * 1024 * 1024;
/// The most [`decode`] reserves before decompressing: 16 MiB, PostgreSQL's
/// default segment size (larger files grow the buffer as they decompress).
const PREALLOCATE_AT_MOST: u64 = 16 * 1024 * 1024;

/// The header of a stored object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// [`FORMAT`], or [`FORMAT_SHA256`] in an older object.
    pub format: String,
    /// The WAL file name.
    pub name: String,
    /// Size of the uncompressed file, in bytes.
    pub size: u64,
    /// BLAKE3 of the uncompressed file, lowercase hexadecimal ([`FORMAT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
    /// SHA-256 of the uncompressed file, lowercase hexadecimal
    /// ([`FORMAT_SHA256`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl Header {
    /// The header [`encode`] writes for `content`.
    pub fn of(name: &str, content: &[u8]) -> Self {
        Self {
            format: FORMAT.to_owned(),
            name: name.to_owned(),
            size: content.len() as u64,
            blake3: Some(blake3_hex(content)),
            sha256: None,
        }
    }

    /// The digest the header records, and its algorithm's name.
    fn digest(&self) -> (&'static str, &str) {
        match (&self.blake3, &self.sha256) {
            (Some(blake3), _) => ("BLAKE3", blake3),
            (None, Some(sha256)) => ("SHA-256", sha256),
            (None, None) => ("no digest", ""),
        }
    }

    /// The digest of `content` with the header's algorithm.
    fn digest_of(&self, content: &[u8]) -> String {
        if self.blake3.is_some() {
            blake3_hex(content)
        } else {
            sha256_hex(content)
        }
    }
}

/// A stored object that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// No header frame, or a header that is not ours.
    #[error("not a cnpgi-wal-archive object: {0}")]
    NotOurs(String),
    /// The header names another file than the key it is stored under.
    #[error("object for {expected} holds {found}")]
    WrongName {
        /// The name looked up.
        expected: String,
        /// The name in the header.
        found: String,
    },
    /// The compressed data does not decompress.
    #[error("cannot decompress: {0}")]
    Decompress(#[source] std::io::Error),
    /// The decompressed data does not match the header.
    #[error(
        "checksum mismatch: the header says {expected_size} bytes with {algorithm} {expected}, the data has {found_size} bytes with {algorithm} {found}"
    )]
    Checksum {
        /// The digest's algorithm: `BLAKE3`, or `SHA-256` in a format-1 object.
        algorithm: &'static str,
        /// The digest in the header.
        expected: String,
        /// The digest of the data.
        found: String,
        /// Size in the header.
        expected_size: u64,
        /// Size of the data.
        found_size: u64,
    },
    /// Compression failed.
    #[error("cannot compress: {0}")]
    Compress(#[source] std::io::Error),
}

/// Lowercase hexadecimal SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Lowercase hexadecimal BLAKE3 of `data`.
pub fn blake3_hex(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// Lowercase hexadecimal of a digest.
pub fn hex(digest: &[u8]) -> String {
    use std::fmt::Write;
    digest
        .iter()
        .fold(String::with_capacity(digest.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// Encodes `content` (the WAL file `name`) as a stored object, compressed at
/// zstd `level`.
///
/// # Errors
///
/// [`ObjectError::Compress`] when zstd fails.
pub fn encode(name: &str, content: &[u8], level: i32) -> Result<Vec<u8>, ObjectError> {
    encode_with_header(&Header::of(name, content), content, level)
}

/// [`encode`] with a header computed by the caller.
pub(crate) fn encode_with_header(header: &Header, content: &[u8], level: i32) -> Result<Vec<u8>, ObjectError> {
    let mut encoder = zstd::bulk::Compressor::new(level).map_err(ObjectError::Compress)?;
    encoder
        .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
        .map_err(ObjectError::Compress)?;
    let compressed = encoder.compress(content).map_err(ObjectError::Compress)?;
    let mut out = header_frame(header, compressed.len())?;
    out.extend_from_slice(&compressed);
    Ok(out)
}

/// An object's first frame: the skippable frame's magic, its length and
/// `header` as JSON, with room for `more` bytes after it.
fn header_frame(header: &Header, more: usize) -> Result<Vec<u8>, ObjectError> {
    let json = serde_json::to_vec(header).map_err(|e| ObjectError::Compress(std::io::Error::other(e)))?;
    let mut out = Vec::with_capacity(8 + json.len() + more);
    out.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    Ok(out)
}

/// A file encoded by [`encode_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// BLAKE3 of the file, lowercase hexadecimal.
    pub blake3: String,
    /// The stored object.
    pub object: Vec<u8>,
}

/// Why [`encode_file`] could not encode a file.
#[derive(Debug, thiserror::Error)]
pub enum EncodeFileError {
    /// The file cannot be read, or changed size while it was.
    #[error("{0}")]
    Read(#[source] std::io::Error),
    /// The file is larger than [`MAX_CONTENT`].
    #[error("larger than 1 GiB ({0} bytes)")]
    TooLarge(u64),
    /// Compression failed.
    #[error(transparent)]
    Object(#[from] ObjectError),
}

/// The size of the reads of [`encode_file`].
const CHUNK: usize = 256 * 1024;

/// [`encode`] of the file at `path`, read in chunks of 256 KiB that are
/// hashed and compressed as they come: it holds the object (compressed)
/// and zstd's context, not the file. Several segments archived at once
/// then cost a few MiB each, not twice their size.
///
/// The header goes first in the object but its digest is known last: it is
/// written with a placeholder of the same length (64 hexadecimal digits),
/// then overwritten in place.
///
/// # Errors
///
/// [`EncodeFileError`].
pub fn encode_file(path: &std::path::Path, name: &str, level: i32) -> Result<Encoded, EncodeFileError> {
    use std::io::{Read as _, Write as _};
    let mut file = std::fs::File::open(path).map_err(EncodeFileError::Read)?;
    let size = file.metadata().map_err(EncodeFileError::Read)?.len();
    if size > MAX_CONTENT {
        return Err(EncodeFileError::TooLarge(size));
    }
    let mut header = Header {
        format: FORMAT.to_owned(),
        name: name.to_owned(),
        size,
        blake3: Some("0".repeat(64)),
        sha256: None,
    };
    let out = header_frame(&header, CHUNK)?;
    let frame_len = out.len();
    let compress = ObjectError::Compress;
    let mut encoder = zstd::stream::write::Encoder::new(out, level).map_err(compress)?;
    encoder.include_checksum(true).map_err(compress)?;
    encoder.set_pledged_src_size(Some(size)).map_err(compress)?;
    let mut hasher = blake3::Hasher::new();
    let mut buffer = vec![0u8; CHUNK];
    let mut read = 0u64;
    loop {
        let n = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(EncodeFileError::Read(e)),
        };
        read += n as u64;
        if read > size {
            break;
        }
        hasher.update(&buffer[..n]);
        encoder.write_all(&buffer[..n]).map_err(compress)?;
    }
    if read != size {
        // zstd refuses a frame shorter or longer than pledged anyway; say why.
        return Err(EncodeFileError::Read(std::io::Error::other(format!(
            "the file changed size while it was read ({size} bytes, then {read})"
        ))));
    }
    let mut object = encoder.finish().map_err(compress)?;
    let blake3 = hasher.finalize().to_hex().to_string();
    header.blake3 = Some(blake3.clone());
    let frame = header_frame(&header, 0)?;
    if frame.len() != frame_len {
        return Err(ObjectError::Compress(std::io::Error::other("the header changed length")).into());
    }
    object[..frame_len].copy_from_slice(&frame);
    Ok(Encoded { blake3, object })
}

/// Reads the header of a stored object, and the offset where the compressed
/// data starts.
///
/// # Errors
///
/// [`ObjectError::NotOurs`] when the object does not start with our header.
pub fn header(stored: &[u8]) -> Result<(Header, usize), ObjectError> {
    let not_ours = |why: &str| ObjectError::NotOurs(why.to_owned());
    let magic = stored.get(0..4).ok_or_else(|| not_ours("shorter than a header"))?;
    if magic != SKIPPABLE_MAGIC.to_le_bytes() {
        return Err(not_ours("no header frame"));
    }
    let length = stored
        .get(4..8)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| not_ours("truncated header"))? as usize;
    if length > MAX_HEADER {
        return Err(not_ours("header too large"));
    }
    let json = stored.get(8..8 + length).ok_or_else(|| not_ours("truncated header"))?;
    let header: Header =
        serde_json::from_slice(json).map_err(|e| ObjectError::NotOurs(format!("unreadable header: {e}")))?;
    let digest_present = match header.format.as_str() {
        FORMAT => header.blake3.is_some() && header.sha256.is_none(),
        FORMAT_SHA256 => header.sha256.is_some() && header.blake3.is_none(),
        other => {
            return Err(ObjectError::NotOurs(format!(
                "unknown format {:?}",
                other.chars().take(64).collect::<String>()
            )));
        }
    };
    if !digest_present {
        return Err(ObjectError::NotOurs(format!(
            "a {} header without its one digest",
            header.format
        )));
    }
    if header.size > MAX_CONTENT {
        return Err(not_ours("size above 1 GiB"));
    }
    Ok((header, 8 + length))
}

/// Decodes a stored object expected to hold the WAL file `name`, and checks
/// the content against the header.
///
/// # Errors
///
/// Any [`ObjectError`]: not ours, another name, corrupt data or checksum.
pub fn decode(stored: &[u8], name: &str) -> Result<(Header, Vec<u8>), ObjectError> {
    let (header, offset) = header(stored)?;
    if header.name != name {
        return Err(ObjectError::WrongName {
            expected: name.to_owned(),
            found: header.name,
        });
    }
    // The header is the store's word, not a promise: reserve at most a WAL
    // segment's usual size up front (a damaged or forged header claiming up
    // to MAX_CONTENT would otherwise cost that memory before a byte is read).
    let mut content = Vec::with_capacity(header.size.min(PREALLOCATE_AT_MOST) as usize);
    let mut decoder = zstd::stream::read::Decoder::new(&stored[offset..]).map_err(ObjectError::Decompress)?;
    // Never inflate past the announced size (plus one byte, to notice more).
    std::io::copy(&mut std::io::Read::take(&mut decoder, header.size + 1), &mut content)
        .map_err(ObjectError::Decompress)?;
    let found = header.digest_of(&content);
    let (algorithm, expected) = header.digest();
    if found != expected || content.len() as u64 != header.size {
        return Err(ObjectError::Checksum {
            algorithm,
            expected: expected.to_owned(),
            found,
            expected_size: header.size,
            found_size: content.len() as u64,
        });
    }
    Ok((header, content))
}

/// The BLAKE3 of the WAL file `name` stored in `stored`, once the object is
/// known intact: what archiving compares its own file's digest with. A
/// format-1 object is decoded and its content hashed with BLAKE3, so that
/// like is compared with like.
///
/// `ours` (the digest of the file being archived) spares the decoding when
/// the header already says the content differs: that answer does not
/// depend on the stored copy being intact.
///
/// # Errors
///
/// Any [`ObjectError`] of [`decode`].
pub fn content_blake3(stored: &[u8], name: &str, ours: &str) -> Result<String, ObjectError> {
    let (header, _) = header(stored)?;
    if let Some(theirs) = header.blake3.filter(|theirs| theirs != ours) {
        return Ok(theirs);
    }
    let (header, content) = decode(stored, name)?;
    Ok(header.blake3.unwrap_or_else(|| blake3_hex(&content)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "000000010000000000000003";

    #[test]
    fn a_file_encoded_in_chunks_decodes_to_itself_with_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(NAME);
        // Several chunks, the last one partial; compressible and not.
        let mut content: Vec<u8> = (0..(3 * CHUNK + 1000)).map(|i| (i % 251) as u8).collect();
        content.extend((0..70_000u32).flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()));
        std::fs::write(&path, &content).unwrap();
        let encoded = encode_file(&path, NAME, 3).unwrap();
        assert_eq!(encoded.blake3, blake3_hex(&content));
        let (header, decoded) = decode(&encoded.object, NAME).unwrap();
        assert_eq!(decoded, content);
        assert_eq!(
            (header.size, header.blake3.as_deref()),
            (content.len() as u64, Some(encoded.blake3.as_str()))
        );
        // The same bytes as the whole-file encoder: one format.
        assert_eq!(header, self::header(&encode(NAME, &content, 3).unwrap()).unwrap().0);
        assert!(matches!(
            encode_file(&dir.path().join("missing"), NAME, 3),
            Err(EncodeFileError::Read(_))
        ));
    }

    #[test]
    fn round_trip_and_plain_zstd_compatibility() {
        let content: Vec<u8> = (0..100_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let stored = encode(NAME, &content, 3).unwrap();
        assert!(stored.len() < content.len() / 2, "compressed: {}", stored.len());
        let (header, back) = decode(&stored, NAME).unwrap();
        assert_eq!(back, content);
        assert_eq!(header.blake3, Some(blake3_hex(&content)));
        assert_eq!((header.format.as_str(), header.sha256), (FORMAT, None));
        // A standard zstd decoder skips the header frame.
        assert_eq!(zstd::stream::decode_all(&stored[..]).unwrap(), content);
    }

    #[test]
    fn corruption_is_detected() {
        let content = vec![7u8; 50_000];
        let stored = encode(NAME, &content, 1).unwrap();
        let (_, offset) = header(&stored).unwrap();

        // A flipped bit in the compressed data: zstd or the checksum notices.
        let mut flipped = stored.clone();
        let last = flipped.len() - 6;
        flipped[last] ^= 0x40;
        assert!(decode(&flipped, NAME).is_err());

        // A header lying about the content.
        let mut header_value = header(&stored).unwrap().0;
        header_value.blake3 = Some(blake3_hex(b"other"));
        let lying = encode_with_header(&header_value, &content, 1).unwrap();
        assert!(matches!(decode(&lying, NAME), Err(ObjectError::Checksum { .. })));

        // Truncated objects.
        assert!(decode(&stored[..offset + 4], NAME).is_err());
        assert!(matches!(decode(&stored[..6], NAME), Err(ObjectError::NotOurs(_))));
        // Plain zstd data, without our header.
        let plain = zstd::bulk::compress(&content, 1).unwrap();
        assert!(matches!(decode(&plain, NAME), Err(ObjectError::NotOurs(_))));
        // Stored under another name.
        assert!(matches!(
            decode(&stored, "000000010000000000000004"),
            Err(ObjectError::WrongName { .. })
        ));
    }

    /// An object as the plugin wrote them before BLAKE3 (format 1).
    fn encode_sha256(name: &str, content: &[u8]) -> Vec<u8> {
        let header = Header {
            format: FORMAT_SHA256.to_owned(),
            name: name.to_owned(),
            size: content.len() as u64,
            blake3: None,
            sha256: Some(sha256_hex(content)),
        };
        encode_with_header(&header, content, 3).unwrap()
    }

    #[test]
    fn a_format_1_object_is_still_read_and_checked_with_sha256() {
        let content: Vec<u8> = (0..50_000u32).flat_map(|i| (i % 97).to_le_bytes()).collect();
        let stored = encode_sha256(NAME, &content);
        let (header, back) = decode(&stored, NAME).unwrap();
        assert_eq!(back, content);
        assert_eq!(header.sha256, Some(sha256_hex(&content)));
        // Compared with a file being archived, like with like: its BLAKE3.
        let ours = blake3_hex(&content);
        assert_eq!(content_blake3(&stored, NAME, &ours).unwrap(), ours);
        assert_eq!(content_blake3(&stored, NAME, &blake3_hex(b"other")).unwrap(), ours);

        // Its SHA-256 still catches a lie.
        let mut lying_header = header.clone();
        lying_header.sha256 = Some(sha256_hex(b"other"));
        let lying = encode_with_header(&lying_header, &content, 3).unwrap();
        match decode(&lying, NAME) {
            Err(
                err @ ObjectError::Checksum {
                    algorithm: "SHA-256", ..
                },
            ) => {
                assert!(err.to_string().contains("with SHA-256"), "{err}")
            }
            other => panic!("expected a SHA-256 mismatch, got {other:?}"),
        }
        assert!(content_blake3(&lying, NAME, &ours).is_err());
    }

    #[test]
    fn a_header_without_its_formats_digest_is_not_ours() {
        let content = b"wal bytes";
        let mut both = Header::of(NAME, content);
        both.sha256 = Some(sha256_hex(content));
        let mut v1_with_blake3 = Header::of(NAME, content);
        v1_with_blake3.format = FORMAT_SHA256.to_owned();
        let mut v2_with_sha256 = Header::of(NAME, content);
        (v2_with_sha256.blake3, v2_with_sha256.sha256) = (None, Some(sha256_hex(content)));
        for wrong in [both, v1_with_blake3, v2_with_sha256] {
            let stored = encode_with_header(&wrong, content, 1).unwrap();
            let err = header(&stored).unwrap_err();
            assert!(
                matches!(&err, ObjectError::NotOurs(why) if why.contains("without its one digest")),
                "{wrong:?}: {err}"
            );
        }
    }

    #[test]
    fn content_blake3_checks_the_stored_copy_unless_the_header_already_differs() {
        let content = vec![9u8; 20_000];
        let ours = blake3_hex(&content);
        let stored = encode(NAME, &content, 1).unwrap();
        assert_eq!(content_blake3(&stored, NAME, &ours).unwrap(), ours);
        // Same digest in the header, damaged data: an error, never "same".
        let mut damaged = stored.clone();
        let last = damaged.len() - 6;
        damaged[last] ^= 0x40;
        assert!(content_blake3(&damaged, NAME, &ours).is_err());
        // Another digest in the header: that digest, the data not read.
        let other = blake3_hex(b"other");
        assert_eq!(content_blake3(&damaged, NAME, &other).unwrap(), ours);
    }

    #[test]
    fn a_header_announcing_more_than_the_data_is_refused_without_reserving_it() {
        // Found by fuzz/fuzz_targets/wal_object.rs (its corpus keeps the input,
        // claims-900-mb, and its -malloc_limit_mb fails a reservation of the
        // announced size): a header claiming 900 MB in front of 100 bytes.
        let content = vec![b'x'; 100];
        let mut header_value = header(&encode(NAME, &content, 1).unwrap()).unwrap().0;
        header_value.size = 900_000_000;
        let lying = encode_with_header(&header_value, &content, 1).unwrap();
        match decode(&lying, NAME) {
            Err(ObjectError::Checksum {
                expected_size,
                found_size,
                ..
            }) => assert_eq!((expected_size, found_size), (900_000_000, 100)),
            other => panic!("expected a checksum error, got {other:?}"),
        }
    }

    #[test]
    fn a_header_announcing_less_than_the_data_is_refused() {
        let content = vec![1u8; 10_000];
        let mut header_value = header(&encode(NAME, &content, 1).unwrap()).unwrap().0;
        header_value.size = 10;
        let stored = encode_with_header(&header_value, &content, 1).unwrap();
        let err = decode(&stored, NAME).unwrap_err();
        assert!(matches!(err, ObjectError::Checksum { found_size: 11, .. }), "{err}");
    }
}
