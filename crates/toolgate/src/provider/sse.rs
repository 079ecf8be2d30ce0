//! Server-Sent Events framing (the WHATWG event-stream format), enough for
//! provider streams: `event:` and `data:` fields, multi-line data, comments,
//! and `\n`, `\r\n` or `\r` line endings.
//!
//! The whole stream is bounded by the body limit before anything is read, and
//! each event's data is strictly decoded like any other provider JSON, so a
//! stream is never a way around the decoder.

use std::borrow::Cow;

use super::ProviderError;
use crate::decode::{Document, Limits, Rejection, decode_strict, decode_tape};

/// One dispatched event, borrowing from the stream.
#[derive(Debug)]
pub struct Event<'a> {
    /// The `event:` field, if any.
    pub name: Option<&'a str>,
    /// The decoded `data:` payload, or `None` for OpenAI's `[DONE]` marker.
    pub data: Option<Document<'a>>,
}

/// Splits a stream into events and strictly decodes each one's data.
///
/// An event whose data is `[DONE]` is kept with `data: None`, because OpenAI
/// Chat uses it to mark a stream that ended normally. Events without data
/// (bare `event:` lines) are dropped, as the format prescribes.
pub fn events<'a>(body: &'a [u8], limits: &Limits) -> Result<Vec<Event<'a>>, ProviderError> {
    if body.len() > limits.max_bytes() {
        // decode_strict() rejects an over-limit input before parsing anything; use
        // it so that the rejection reads the same as a non-stream body's.
        if let Err(r) = decode_strict(body, limits) {
            return Err(ProviderError::Body(r));
        }
    }
    let text = std::str::from_utf8(body).map_err(|e| {
        super::malformed(
            super::At::ROOT,
            format!("stream is not UTF-8 (byte {})", e.valid_up_to()),
        )
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    let mut name: Option<&str> = None;
    let mut data: Option<Cow<'a, str>> = None;
    for line in lines(text) {
        if line.is_empty() {
            dispatch(&mut out, name.take(), data.take(), limits)?;
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => name = Some(value),
            "data" => match &mut data {
                Some(d) => {
                    let d = d.to_mut();
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(Cow::Borrowed(value)),
            },
            // `id` and `retry` matter to reconnecting clients, not here.
            _ => {}
        }
    }
    // A final event without its blank line is still an event: whether the
    // stream is complete is decided by its content (a terminal event), not
    // by the framing.
    dispatch(&mut out, name, data, limits)?;
    Ok(out)
}

fn dispatch<'a>(
    out: &mut Vec<Event<'a>>,
    name: Option<&'a str>,
    data: Option<Cow<'a, str>>,
    limits: &Limits,
) -> Result<(), ProviderError> {
    let Some(data) = data else {
        return Ok(());
    };
    let index = out.len();
    let value = if data.trim() == "[DONE]" {
        None
    } else {
        // A rejected event keeps its decoder code (a duplicate key in a
        // streamed body is `duplicate_key`, as in a whole one), with the
        // pointer prefixed by the event's position.
        // A single `data:` line is a slice of the stream; lines joined
        // into a new string give a document that owns its strings.
        let decoded = match &data {
            Cow::Borrowed(text) => decode_tape(text.as_bytes(), limits),
            Cow::Owned(text) => decode_tape(text.as_bytes(), limits).map(Document::into_owned),
        };
        Some(decoded.map_err(|r| {
            ProviderError::Body(Rejection::new(
                r.code(),
                format!("/events/{index}{}", r.pointer()),
                format!("event {index}: {}", r.message()),
            ))
        })?)
    };
    out.push(Event { name, data: value });
    Ok(())
}

/// Lines split on `\r\n`, `\n` or `\r`.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest.find(['\r', '\n']).unwrap_or(rest.len());
        let line = &rest[..end];
        let after = &rest[end..];
        rest = if let Some(r) = after.strip_prefix("\r\n") {
            r
        } else if let Some(r) = after.strip_prefix(['\r', '\n']) {
            r
        } else {
            after
        };
        Some(line)
    })
}
