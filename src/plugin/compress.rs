//! Compressed plugin components in ConfigMaps: `binaryData["plugin.wasm"]` may hold the component
//! gzip- or zstd-compressed, declared by `data["encoding"]` (`identity`, the default when absent,
//! `gzip` or `zstd`), so that a larger component still fits the ~1 MiB an object may hold.
//!
//! [`decode`] treats its input as hostile. Its output is capped by the caller: it asks the decoder
//! for at most `cap + 1` bytes and never sizes a buffer from a length the stream declares, so a
//! decompression bomb fails with [`DecodeError::TooLarge`] after decoding about `cap` bytes, in
//! time linear in the input plus the cap and in memory bounded by the cap (see [`decode`]). A
//! ConfigMap holds exactly one component: trailing bytes, a second gzip member or a second zstd
//! frame, and zstd skippable frames are refused as corrupt.
//!
//! Owns: the encoding names, capped decoding, and the encoder behind
//! `diorch plugin configmap --compress`. Must not touch: where the bytes come from or go (the
//! ConfigMap spec and the CLI read and write them) and the cap's value (the caller's).

use std::fmt;
use std::io::{self, Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::str::FromStr;

use flate2::Compression;
use flate2::bufread::GzDecoder;
use flate2::write::GzEncoder;
use ruzstd::decoding::StreamingDecoder;
use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::encoding::{CompressionLevel, compress_to_vec};

/// How `binaryData["plugin.wasm"]` is stored, from `data["encoding"]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// The raw component (also what an absent `encoding` means).
    Identity,
    /// One gzip member (RFC 1952).
    Gzip,
    /// One zstd frame (RFC 8878).
    Zstd,
}

impl Encoding {
    /// The name used in `data["encoding"]`.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Identity => "identity",
            Encoding::Gzip => "gzip",
            Encoding::Zstd => "zstd",
        }
    }
}

impl FromStr for Encoding {
    type Err = DecodeError;

    /// Exact lowercase names only: a ConfigMap says one thing one way.
    fn from_str(s: &str) -> Result<Self, DecodeError> {
        match s {
            "identity" => Ok(Encoding::Identity),
            "gzip" => Ok(Encoding::Gzip),
            "zstd" => Ok(Encoding::Zstd),
            other => Err(DecodeError::UnknownEncoding(one_line(other, 64))),
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a component could not be decoded (or encoded).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// `data["encoding"]` names no known encoding (the value is cut to 64 characters).
    #[error("unknown encoding {0:?}: expected one of identity, gzip, zstd")]
    UnknownEncoding(String),
    /// The decoded component would be larger than the cap.
    #[error("decompressed data exceeds {cap} bytes")]
    TooLarge { cap: usize },
    /// The zstd frame asks for a larger history window than the cap allows: decoding it could
    /// hold that much memory before any output is checked against the cap.
    #[error(
        "zstd frame needs a {window}-byte window, more than the {max} bytes allowed by the size cap; \
         compress with a known size or a smaller window"
    )]
    WindowTooLarge { window: u64, max: u64 },
    /// Not a valid stream: the decoder's message (one line, at most 200 characters).
    #[error("corrupt compressed data: {0}")]
    Corrupt(String),
    /// Compressing failed (not expected when writing to memory).
    #[error("compression failed: {0}")]
    Encode(String),
}

/// The longest decoder message kept in [`DecodeError::Corrupt`]: it ends up in a status field.
const MAX_MESSAGE: usize = 200;

/// Bytes asked of the decoder per read, and the output buffer's first size.
const CHUNK: usize = 64 * 1024;

/// The smallest zstd window accepted whatever the cap: one block (128 KiB) is what any encoder may
/// declare for a small input (ruzstd's own encoder always does), and it costs little.
const MIN_ZSTD_WINDOW: usize = 128 * 1024;

/// Decodes `input` stored with `encoding`, refusing output larger than `cap` bytes.
///
/// Bounded work: the decoder is asked for at most `cap + 1` bytes (one more than allowed, to tell
/// "exactly `cap`" from "more"), so decoding costs time linear in `input.len() + cap` whatever the
/// stream claims; a gzip or zstd bomb fails with [`DecodeError::TooLarge`] once it passes the cap.
///
/// Bounded memory: the output grows as it is read, to at most `cap` bytes, plus a 64 KiB read
/// buffer. gzip adds the inflater's ~40 KiB. zstd adds the decoder's window, which ruzstd fills
/// before handing out bytes: windows over `max(cap, 128 KiB)` are refused
/// ([`DecodeError::WindowTooLarge`]), so a zstd decode holds at most about twice the cap.
/// Declared content sizes are only used to refuse early (a zstd frame declaring more than `cap`),
/// never to allocate.
pub fn decode(encoding: Encoding, input: &[u8], cap: usize) -> Result<Vec<u8>, DecodeError> {
    match encoding {
        Encoding::Identity if input.len() > cap => Err(DecodeError::TooLarge { cap }),
        Encoding::Identity => Ok(input.to_vec()),
        Encoding::Gzip => guarded(|| decode_gzip(input, cap)),
        Encoding::Zstd => guarded(|| decode_zstd(input, cap)),
    }
    .map_err(|e| match e {
        // Name the encoding: the decoders' own messages often do not.
        DecodeError::Corrupt(message) => corrupt(&format!("{encoding}: {message}")),
        other => other,
    })
}

/// Compresses `input` for a ConfigMap: gzip at the best level (with a fixed header: no name, time
/// 0, so the same component gives the same bytes), zstd with ruzstd's encoder (its only level,
/// `Fastest`, about zstd's level 1 with a 128 KiB window, and a content checksum).
pub fn encode(encoding: Encoding, input: &[u8]) -> Result<Vec<u8>, DecodeError> {
    match encoding {
        Encoding::Identity => Ok(input.to_vec()),
        Encoding::Gzip => {
            let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
            encoder
                .write_all(input)
                .and_then(|()| encoder.finish())
                .map_err(|e| DecodeError::Encode(one_line(&e.to_string(), MAX_MESSAGE)))
        }
        Encoding::Zstd => Ok(compress_to_vec(input, CompressionLevel::Fastest)),
    }
}

/// Runs a decoder on hostile input, turning a panic inside it (a bug in the decoder crate, not
/// expected) into a refusal rather than unwinding through the operator's watcher.
fn guarded(run: impl FnOnce() -> Result<Vec<u8>, DecodeError>) -> Result<Vec<u8>, DecodeError> {
    // The closure only borrows the input slice; nothing it could leave half-updated is seen again.
    catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|_| {
        Err(DecodeError::Corrupt(
            "the decoder panicked on this input".to_owned(),
        ))
    })
}

fn decode_gzip(input: &[u8], cap: usize) -> Result<Vec<u8>, DecodeError> {
    // The `bufread` decoder consumes exactly one member from the slice (the `read` one would
    // buffer ahead), so what is left afterwards is trailing data. `GzDecoder`, not
    // `MultiGzDecoder`: a second member is trailing data too.
    let mut decoder = GzDecoder::new(input);
    let out = read_capped(&mut decoder, cap)?;
    if decoder.header().is_none() {
        return Err(corrupt("no gzip header"));
    }
    let rest = decoder.into_inner();
    if rest.starts_with(&[0x1f, 0x8b]) {
        return Err(corrupt(
            "trailing data: a second gzip member (only one is accepted)",
        ));
    }
    if !rest.is_empty() {
        return Err(corrupt(&format!(
            "trailing data after the gzip member: {} of {} input bytes",
            rest.len(),
            input.len()
        )));
    }
    Ok(out)
}

fn decode_zstd(input: &[u8], cap: usize) -> Result<Vec<u8>, DecodeError> {
    // ruzstd keeps a whole window of output before handing any out, so the window must be
    // bounded by the cap too, or a frame could make it hold far more than the cap.
    let max = u64::try_from(cap.max(MIN_ZSTD_WINDOW)).unwrap_or(u64::MAX);
    let mut stream =
        StreamingDecoder::new_with_max_window_size(input, max).map_err(|e| match e {
            FrameDecoderError::WindowSizeTooBig { requested, .. } => DecodeError::WindowTooLarge {
                window: requested,
                max,
            },
            FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame { .. }) => {
                corrupt("a zstd skippable frame (only one data frame is accepted)")
            }
            // ruzstd prints these two with Debug: say them plainly.
            FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::BadMagicNumber(
                magic,
            )) => corrupt(&format!("not a zstd frame (magic number {magic:#010x})")),
            FrameDecoderError::ReadFrameHeaderError(
                ReadFrameHeaderError::MagicNumberReadError(_),
            ) => corrupt("too short for a zstd frame"),
            other => corrupt(&other.to_string()),
        })?;
    // 0 means "not declared" (or an empty frame): a refusal only, never an allocation size.
    let declared = stream.decoder.content_size();
    if declared > u64::try_from(cap).unwrap_or(u64::MAX) {
        return Err(DecodeError::TooLarge { cap });
    }
    let out = read_capped(&mut stream, cap)?;
    let frame = &stream.decoder;
    if !frame.is_finished() {
        return Err(corrupt("truncated zstd frame"));
    }
    // ruzstd reads the checksum but leaves comparing it to the caller.
    if let (Some(stored), Some(computed)) = (
        frame.get_checksum_from_data(),
        frame.get_calculated_checksum(),
    ) && stored != computed
    {
        return Err(corrupt("zstd content checksum mismatch"));
    }
    if declared != 0 && declared != out.len() as u64 {
        return Err(corrupt(&format!(
            "zstd frame declares {declared} bytes but holds {}",
            out.len()
        )));
    }
    let rest = stream.into_inner();
    if !rest.is_empty() {
        return Err(corrupt(&format!(
            "trailing data after the zstd frame (only one is accepted): {} of {} input bytes",
            rest.len(),
            input.len()
        )));
    }
    Ok(out)
}

/// Reads `reader` to its end, failing with [`DecodeError::TooLarge`] past `cap` bytes.
///
/// At most `cap + 1` bytes are asked for (`Read::take`), and the output's capacity never passes
/// `cap`: it doubles from 64 KiB and is clamped there (`reserve_exact`, since `Vec`'s own growth
/// could double past the cap).
fn read_capped(reader: impl Read, cap: usize) -> Result<Vec<u8>, DecodeError> {
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    let mut reader = reader.take(limit);
    // Small caps need no 64 KiB buffer.
    let mut chunk = vec![0u8; CHUNK.min(cap.saturating_add(1))];
    let mut out: Vec<u8> = Vec::new();
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(corrupt(&e.to_string())),
        };
        let data = chunk.get(..n).unwrap_or(&chunk);
        if data.len() > cap - out.len() {
            return Err(DecodeError::TooLarge { cap });
        }
        if out.capacity() - out.len() < data.len() {
            let want = out
                .capacity()
                .saturating_mul(2)
                .max(out.len() + data.len())
                .max(CHUNK)
                .min(cap);
            out.reserve_exact(want - out.len());
        }
        out.extend_from_slice(data);
    }
}

fn corrupt(message: &str) -> DecodeError {
    DecodeError::Corrupt(one_line(message, MAX_MESSAGE))
}

/// `text` on one line, cut to `max` characters (an ellipsis marks the cut).
fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use flate2::Crc;
    use flate2::write::DeflateEncoder;

    use super::*;

    const MIB: usize = 1024 * 1024;

    /// 1 MiB that compresses, but not trivially: pseudo-random runs between repeated phrases.
    fn sample() -> Vec<u8> {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut out = Vec::with_capacity(MIB);
        while out.len() < MIB {
            let r = next();
            if r % 3 == 0 {
                let len = (r >> 8) as usize % 64;
                out.extend((0..len).map(|_| next() as u8));
            } else {
                let phrases: [&[u8]; 4] = [
                    b"(module (func $schedule (param i32) (result i32)))",
                    b"local.get 0 i32.const 1 i32.add",
                    b"diorch:plugins/policy@0.1.0",
                    b"\0asm\x0d\0\x01\0",
                ];
                out.extend_from_slice(phrases[(r >> 16) as usize % phrases.len()]);
            }
        }
        out.truncate(MIB);
        out
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        encode(Encoding::Gzip, data).unwrap()
    }

    fn zstd(data: &[u8]) -> Vec<u8> {
        encode(Encoding::Zstd, data).unwrap()
    }

    fn assert_corrupt(result: Result<Vec<u8>, DecodeError>, needle: &str) {
        match result {
            Err(DecodeError::Corrupt(message)) => {
                assert!(message.contains(needle), "{message:?} lacks {needle:?}");
                assert!(message.chars().count() <= MAX_MESSAGE + 1, "{message:?}");
                assert!(!message.contains('\n'), "{message:?}");
            }
            other => panic!("expected Corrupt({needle:?}), got {other:?}"),
        }
    }

    /// `mib` MiB of zeros as one gzip member, built in the time of compressing 2 MiB (compressing
    /// 1 GiB unoptimised takes ~10 s): a sync flush ends the deflate blocks of each MiB on a byte
    /// boundary, and the second MiB's blocks only copy earlier zeros, so they can be repeated.
    fn gzip_zeros(mib: usize) -> Vec<u8> {
        let zeros = vec![0u8; MIB];
        let mut deflate = DeflateEncoder::new(Vec::new(), Compression::best());
        deflate.write_all(&zeros).unwrap();
        deflate.flush().unwrap();
        let first_end = deflate.get_ref().len();
        deflate.write_all(&zeros).unwrap();
        deflate.flush().unwrap();
        let second_end = deflate.get_ref().len();
        let body = deflate.finish().unwrap();
        let mut crc = Crc::new();
        crc.update(&zeros);
        let mut total = Crc::new();
        let mut member = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
        member.extend_from_slice(&body[..first_end]);
        total.combine(&crc);
        for _ in 1..mib {
            member.extend_from_slice(&body[first_end..second_end]);
            total.combine(&crc);
        }
        member.extend_from_slice(&body[second_end..]);
        member.extend_from_slice(&total.sum().to_le_bytes());
        member.extend_from_slice(&total.amount().to_le_bytes());
        member
    }

    /// A zstd frame header: no content size, no checksum, a window of 2^`window_log` bytes.
    fn zstd_header(window_log: u8) -> Vec<u8> {
        assert!((10..=41).contains(&window_log));
        let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00];
        frame.push((window_log - 10) << 3);
        frame
    }

    /// A zstd block header: `kind` 0 raw, 1 RLE, 2 compressed.
    fn block_header(last: bool, kind: u32, size: u32) -> [u8; 3] {
        let value = u32::from(last) | (kind << 1) | (size << 3);
        let bytes = value.to_le_bytes();
        [bytes[0], bytes[1], bytes[2]]
    }

    /// `blocks` RLE blocks of 128 KiB of zeros in one frame with a 1 MiB window: 4 bytes each
    /// for 128 KiB of output, so 1 GiB is 32 KiB of input.
    fn zstd_rle_bomb(blocks: usize) -> Vec<u8> {
        let mut frame = zstd_header(20);
        for i in 0..blocks {
            frame.extend_from_slice(&block_header(i + 1 == blocks, 1, 128 * 1024));
            frame.push(0);
        }
        frame
    }

    #[test]
    fn encodings_parse_exactly_and_display_back() {
        for encoding in [Encoding::Identity, Encoding::Gzip, Encoding::Zstd] {
            assert_eq!(encoding.to_string().parse::<Encoding>(), Ok(encoding));
        }
        assert_eq!("gzip".parse(), Ok(Encoding::Gzip));
        for bad in ["GZIP", "Zstd", "br", "", " gzip", "deflate"] {
            let err = bad.parse::<Encoding>().unwrap_err();
            assert_eq!(err, DecodeError::UnknownEncoding(bad.to_owned()));
            assert!(err.to_string().contains("identity, gzip, zstd"), "{err}");
        }
        let long = "x".repeat(10_000);
        let DecodeError::UnknownEncoding(kept) = long.parse::<Encoding>().unwrap_err() else {
            panic!("expected UnknownEncoding");
        };
        assert_eq!(kept.chars().count(), 65);
    }

    #[test]
    fn gzip_round_trips_a_mebibyte() {
        let data = sample();
        let packed = gzip(&data);
        assert!(packed.len() < data.len() * 3 / 4, "{} bytes", packed.len());
        assert_eq!(decode(Encoding::Gzip, &packed, MIB), Ok(data));
    }

    #[test]
    fn zstd_round_trips_a_mebibyte() {
        let data = sample();
        let packed = zstd(&data);
        assert!(packed.len() < data.len() * 3 / 4, "{} bytes", packed.len());
        assert_eq!(decode(Encoding::Zstd, &packed, MIB), Ok(data));
    }

    #[test]
    fn identity_passes_through_up_to_the_cap() {
        let data = sample();
        assert_eq!(encode(Encoding::Identity, &data), Ok(data.clone()));
        assert_eq!(decode(Encoding::Identity, &data, MIB), Ok(data.clone()));
        assert_eq!(
            decode(Encoding::Identity, &data, MIB - 1),
            Err(DecodeError::TooLarge { cap: MIB - 1 })
        );
    }

    #[test]
    fn empty_components_round_trip() {
        for encoding in [Encoding::Identity, Encoding::Gzip, Encoding::Zstd] {
            let packed = encode(encoding, b"").unwrap();
            assert_eq!(decode(encoding, &packed, 0), Ok(Vec::new()), "{encoding}");
        }
    }

    #[test]
    fn output_of_exactly_the_cap_passes_and_one_byte_more_fails() {
        let data = sample();
        for encoding in [Encoding::Identity, Encoding::Gzip, Encoding::Zstd] {
            let packed = encode(encoding, &data).unwrap();
            assert_eq!(
                decode(encoding, &packed, data.len()),
                Ok(data.clone()),
                "{encoding}"
            );
            assert_eq!(
                decode(encoding, &packed, data.len() - 1),
                Err(DecodeError::TooLarge {
                    cap: data.len() - 1
                }),
                "{encoding}"
            );
        }
    }

    #[test]
    fn a_gzip_bomb_fails_fast_at_the_cap() {
        // The construction makes a valid member: 3 MiB of zeros with the right CRC and size.
        assert_eq!(
            decode(Encoding::Gzip, &gzip_zeros(3), 3 * MIB),
            Ok(vec![0; 3 * MIB])
        );
        let bomb = gzip_zeros(1024);
        assert!(bomb.len() < 2 * MIB, "{} bytes", bomb.len());
        let started = Instant::now();
        let result = decode(Encoding::Gzip, &bomb, 16 * MIB);
        let took = started.elapsed();
        assert_eq!(result, Err(DecodeError::TooLarge { cap: 16 * MIB }));
        assert_eq!(
            result.unwrap_err().to_string(),
            "decompressed data exceeds 16777216 bytes"
        );
        // Decoding all of it takes seconds even optimised; 16 MiB takes milliseconds.
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn a_zstd_bomb_fails_fast_at_the_cap() {
        let bomb = zstd_rle_bomb(8 * 1024);
        assert_eq!(bomb.len(), 6 + 8 * 1024 * 4);
        let started = Instant::now();
        let result = decode(Encoding::Zstd, &bomb, 16 * MIB);
        let took = started.elapsed();
        assert_eq!(result, Err(DecodeError::TooLarge { cap: 16 * MIB }));
        assert!(took < Duration::from_secs(5), "{took:?}");
        // The same frame cut to exactly the cap decodes: the bomb is a valid frame.
        let fits = zstd_rle_bomb(128);
        assert_eq!(
            decode(Encoding::Zstd, &fits, 16 * MIB).map(|v| v.len()),
            Ok(16 * MIB)
        );
    }

    #[test]
    fn a_declared_zstd_content_size_of_2_pow_60_fails_without_allocating_it() {
        let huge: u64 = 1 << 60;
        // Single segment: the window is the content size, refused before any allocation.
        let mut single = vec![0x28, 0xb5, 0x2f, 0xfd, 0xe0];
        single.extend_from_slice(&huge.to_le_bytes());
        single.extend_from_slice(&block_header(true, 1, 128 * 1024));
        single.push(0);
        assert_eq!(
            decode(Encoding::Zstd, &single, 16 * MIB),
            Err(DecodeError::WindowTooLarge {
                window: huge,
                max: 16 * MIB as u64
            })
        );
        // A small window with the same claim: refused on the claim alone.
        let mut windowed = vec![0x28, 0xb5, 0x2f, 0xfd, 0xc0, (20 - 10) << 3];
        windowed.extend_from_slice(&huge.to_le_bytes());
        windowed.extend_from_slice(&block_header(true, 1, 128 * 1024));
        windowed.push(0);
        assert_eq!(
            decode(Encoding::Zstd, &windowed, 16 * MIB),
            Err(DecodeError::TooLarge { cap: 16 * MIB })
        );
    }

    #[test]
    fn a_zstd_window_over_the_cap_is_refused() {
        let mut frame = zstd_header(30);
        frame.extend_from_slice(&block_header(true, 0, 0));
        let err = decode(Encoding::Zstd, &frame, 16 * MIB).unwrap_err();
        assert_eq!(
            err,
            DecodeError::WindowTooLarge {
                window: 1 << 30,
                max: 16 * MIB as u64
            }
        );
        // Small caps still take one block's window, as every encoder may declare it.
        assert_eq!(
            decode(Encoding::Zstd, &zstd(b"tiny"), 4),
            Ok(b"tiny".to_vec())
        );
    }

    #[test]
    fn a_declared_zstd_content_size_must_match() {
        // Single segment, 1-byte content size 10, one raw block of 5 bytes.
        let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x20, 10];
        frame.extend_from_slice(&block_header(true, 0, 5));
        frame.extend_from_slice(b"hello");
        assert_corrupt(
            decode(Encoding::Zstd, &frame, 100),
            "declares 10 bytes but holds 5",
        );
        frame[5] = 5;
        assert_eq!(decode(Encoding::Zstd, &frame, 100), Ok(b"hello".to_vec()));
    }

    #[test]
    fn truncated_streams_are_corrupt() {
        let data = sample();
        for (encoding, packed) in [(Encoding::Gzip, gzip(&data)), (Encoding::Zstd, zstd(&data))] {
            for keep in [
                0,
                3,
                9,
                packed.len() / 2,
                packed.len() - 4,
                packed.len() - 1,
            ] {
                let result = decode(encoding, &packed[..keep], 2 * MIB);
                assert!(
                    matches!(result, Err(DecodeError::Corrupt(_))),
                    "{encoding} cut to {keep}: {result:?}"
                );
            }
        }
    }

    #[test]
    fn trailing_data_is_corrupt() {
        let data = sample();
        for (encoding, packed) in [(Encoding::Gzip, gzip(&data)), (Encoding::Zstd, zstd(&data))] {
            let mut padded = packed.clone();
            padded.extend_from_slice(b"garbage");
            let len = padded.len();
            assert_corrupt(
                decode(encoding, &padded, 2 * MIB),
                &format!("trailing data after the {encoding} "),
            );
            assert_corrupt(
                decode(encoding, &padded, 2 * MIB),
                &format!(": 7 of {len} input bytes"),
            );
            let mut zero = packed;
            zero.push(0);
            assert_corrupt(decode(encoding, &zero, 2 * MIB), "1 of ");
        }
    }

    #[test]
    fn two_gzip_members_are_corrupt() {
        let mut two = gzip(b"first component");
        two.extend_from_slice(&gzip(b"second component"));
        assert_corrupt(decode(Encoding::Gzip, &two, MIB), "second gzip member");
    }

    #[test]
    fn two_zstd_frames_and_skippable_frames_are_corrupt() {
        let mut two = zstd(b"first component");
        two.extend_from_slice(&zstd(b"second component"));
        assert_corrupt(decode(Encoding::Zstd, &two, MIB), "trailing data");

        let mut skippable = vec![0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4];
        skippable.extend_from_slice(&zstd(b"component"));
        assert_corrupt(decode(Encoding::Zstd, &skippable, MIB), "skippable frame");
    }

    #[test]
    fn checksums_are_checked() {
        let data = sample();
        let mut packed = gzip(&data);
        let crc_at = packed.len() - 8;
        packed[crc_at] ^= 1;
        assert_corrupt(decode(Encoding::Gzip, &packed, MIB), "checksum");

        let mut packed = zstd(&data);
        let last = packed.len() - 1;
        packed[last] ^= 1;
        assert_corrupt(decode(Encoding::Zstd, &packed, MIB), "checksum mismatch");
    }

    #[test]
    fn garbage_and_empty_input_are_corrupt() {
        for encoding in [Encoding::Gzip, Encoding::Zstd] {
            for input in [&b""[..], b"\0asm\x0d\0\x01\0", &[0xff; 300]] {
                let result = decode(encoding, input, MIB);
                let Err(DecodeError::Corrupt(message)) = &result else {
                    panic!("{encoding} {input:?}: {result:?}");
                };
                assert!(message.starts_with(&format!("{encoding}: ")), "{message:?}");
                assert!(!message.contains('\n'), "{message:?}");
            }
        }
    }

    #[test]
    fn gzip_output_is_reproducible() {
        let data = sample();
        let packed = gzip(&data);
        assert_eq!(packed, gzip(&data));
        // No file name, modification time 0: nothing of the machine that packed it.
        assert_eq!(packed[..10], [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 0xff]);
    }

    #[test]
    fn a_panicking_decoder_is_a_refusal() {
        assert_corrupt(guarded(|| panic!("decoder bug")), "panicked");
    }

    #[test]
    fn zstd_header_errors_read_plainly() {
        assert_corrupt(
            decode(Encoding::Zstd, b"\0as", MIB),
            "zstd: too short for a zstd frame",
        );
        assert_corrupt(
            decode(Encoding::Zstd, b"\0asm\x0d\0\x01\0", MIB),
            "zstd: not a zstd frame (magic number 0x6d736100)",
        );
    }

    #[test]
    fn messages_are_one_short_line() {
        let text = format!("first\nsecond\r{}", "é".repeat(500));
        let line = one_line(&text, MAX_MESSAGE);
        assert!(line.starts_with("first second "), "{line:?}");
        assert_eq!(line.chars().count(), MAX_MESSAGE + 1);
        assert!(line.ends_with('…'));
        assert_eq!(one_line("short", MAX_MESSAGE), "short");
    }
}
