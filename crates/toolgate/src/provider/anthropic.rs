//! Anthropic Messages: `content` blocks, `stop_reason`, `stop_details`.

use std::borrow::Cow;

use super::sse::Event;
use super::{
    At, ProviderError, RawArguments, RawToolCall, Stop, StopClass, Turn, array, field, fields,
    malformed, member, object, push_text, raw_stop,
};
use crate::decode::{Json, Object};

fn classify(stop_reason: Option<&str>, details: Option<Object<'_>>) -> Stop {
    let class = match stop_reason {
        Some("end_turn" | "stop_sequence") => StopClass::Complete,
        Some("tool_use") => StopClass::ToolUse,
        Some("max_tokens" | "model_context_window_exceeded") => StopClass::Truncated,
        Some("refusal") => StopClass::Refused,
        // `pause_turn` (a server tool paused a long turn) and anything newer
        // mean the turn is not a finished proposal.
        _ => StopClass::Unknown,
    };
    let mut stop = Stop::new(class, stop_reason.map(raw_stop));
    if let Some(d) = details {
        let [category, explanation] = fields(d, ["category", "explanation"]);
        stop.category = category.get().and_then(|v| v.as_str()).map(str::to_owned);
        stop.explanation = explanation
            .get()
            .and_then(|v| v.as_str())
            .map(str::to_owned);
    }
    stop
}

/// A complete (non-stream) Messages response.
pub(super) fn parse<'t>(body: Json<'t>) -> Result<Turn<'t>, ProviderError> {
    let root = At::ROOT;
    let msg = object(body, root)?;
    let [kind, stop_reason, details, content] =
        fields(msg, ["type", "stop_reason", "stop_details", "content"]);
    if let Some(kind) = kind.opt_str(root)?
        && kind != "message"
    {
        return Err(malformed(
            root.key("type"),
            format!("expected \"message\", got {kind:?}"),
        ));
    }
    let stop_reason = stop_reason.opt_str(root)?;
    let details = details.get().and_then(|v| v.as_object());
    let stop = classify(stop_reason, details);
    let cp = root.key("content");
    let content = array(content.required(root)?, cp)?;
    let mut text = Cow::Borrowed("");
    let mut tool_calls = Vec::new();
    for (i, block) in content.iter().enumerate() {
        let p = cp.index(i);
        let block = object(block, p)?;
        let [kind, block_text, name, id, input] =
            fields(block, ["type", "text", "name", "id", "input"]);
        match kind.req_str(p)? {
            "text" => push_text(&mut text, block_text.req_str(p)?),
            "tool_use" => tool_calls.push(RawToolCall {
                name: Cow::Borrowed(name.req_str(p)?),
                id: id.opt_str(p)?.map(Cow::Borrowed),
                arguments: RawArguments::Value(input.required(p)?),
            }),
            "thinking" | "redacted_thinking" => {}
            other => {
                return Err(malformed(
                    p.key("type"),
                    format!("content block type {other:?} is not supported"),
                ));
            }
        }
    }
    Ok(Turn {
        text,
        tool_calls,
        stop,
    })
}

/// A block being assembled from a stream.
enum Block<'t> {
    Text(String),
    Tool {
        name: &'t str,
        id: Option<&'t str>,
        json: String,
        /// `content_block_start` may carry a non-empty `input` (it normally
        /// carries `{}` and the deltas bring the JSON).
        start_input: Option<Json<'t>>,
    },
    Ignored,
}

/// A Messages stream: `message_start`, `content_block_start/delta/stop`,
/// `message_delta` (the stop reason), `message_stop`.
pub(super) fn parse_stream<'t>(events: &'t [Event<'t>]) -> Result<Turn<'t>, ProviderError> {
    let mut blocks: Vec<(Block<'t>, bool)> = Vec::new();
    let mut stop_reason: Option<&str> = None;
    let mut details: Option<Object<'t>> = None;
    let mut saw_start = false;
    let mut saw_stop = false;
    let all = At::ROOT.key("events");
    for (n, ev) in events.iter().enumerate() {
        let p = all.index(n);
        let Some(data) = &ev.data else { continue };
        let data = object(data.root(), p)?;
        match field(data, "type").req_str(p)? {
            "message_start" => {
                saw_start = true;
                if let Some(m) = data.get("message").and_then(|v| v.as_object())
                    && let Some(r) = m.get("stop_reason").and_then(|v| v.as_str())
                {
                    stop_reason = Some(r);
                }
            }
            "content_block_start" => {
                let index = index(data, p)?;
                if index != blocks.len() {
                    return Err(malformed(p.key("index"), "content blocks out of order"));
                }
                let cp = p.key("content_block");
                let cb = object(member(data, "content_block", p)?, cp)?;
                let block = match field(cb, "type").req_str(cp)? {
                    "text" => Block::Text(field(cb, "text").opt_str(cp)?.unwrap_or("").to_owned()),
                    "tool_use" => Block::Tool {
                        name: field(cb, "name").req_str(cp)?,
                        id: field(cb, "id").opt_str(cp)?,
                        json: String::new(),
                        start_input: cb.get("input"),
                    },
                    "thinking" | "redacted_thinking" => Block::Ignored,
                    other => {
                        return Err(malformed(
                            cp.key("type"),
                            format!("content block type {other:?} is not supported"),
                        ));
                    }
                };
                blocks.push((block, false));
            }
            "content_block_delta" => {
                let index = index(data, p)?;
                let dp = p.key("delta");
                let delta = object(member(data, "delta", p)?, dp)?;
                let Some((block, _)) = blocks.get_mut(index) else {
                    return Err(malformed(p.key("index"), "delta for a block never started"));
                };
                match (block, field(delta, "type").req_str(dp)?) {
                    (Block::Text(t), "text_delta") => t.push_str(field(delta, "text").req_str(dp)?),
                    (Block::Tool { json, .. }, "input_json_delta") => {
                        json.push_str(field(delta, "partial_json").req_str(dp)?);
                    }
                    (Block::Ignored, _) | (_, "citations_delta") => {}
                    (_, other) => {
                        return Err(malformed(
                            dp.key("type"),
                            format!("delta type {other:?} does not fit its block"),
                        ));
                    }
                }
            }
            "content_block_stop" => {
                let index = index(data, p)?;
                match blocks.get_mut(index) {
                    Some((_, stopped)) => *stopped = true,
                    None => {
                        return Err(malformed(p.key("index"), "stop for a block never started"));
                    }
                }
            }
            "message_delta" => {
                if let Some(d) = data.get("delta").and_then(|v| v.as_object()) {
                    if let Some(r) = d.get("stop_reason").and_then(|v| v.as_str()) {
                        stop_reason = Some(r);
                    }
                    if let Some(sd) = d.get("stop_details").and_then(|v| v.as_object()) {
                        details = Some(sd);
                    }
                }
            }
            "message_stop" => saw_stop = true,
            "ping" => {}
            "error" => {
                let message = data
                    .get("error")
                    .and_then(|e| e.get("message"))
                    .and_then(|v| v.as_str())
                    .unwrap_or("stream error")
                    .to_owned();
                let mut stop = Stop::new(StopClass::Unknown, Some("error".into()));
                stop.explanation = Some(message);
                return Ok(Turn::stopped(stop));
            }
            // New event types are additive in Anthropic's versioning policy.
            _ => {}
        }
    }
    if !saw_start {
        return Err(malformed(all, "no message_start event"));
    }
    let complete = saw_stop && blocks.iter().all(|(_, stopped)| *stopped);
    let mut stop = classify(stop_reason, details);
    if !complete && stop.class != StopClass::Truncated {
        // The stream was cut: whatever the last stop value said, nothing in
        // it is whole. (A `max_tokens` stream keeps its own raw value.)
        stop = Stop::new(StopClass::Truncated, Some("stream_cut".into()));
    }
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (block, _) in blocks {
        match block {
            Block::Text(t) => text.push_str(&t),
            Block::Tool {
                name,
                id,
                json,
                start_input,
            } => {
                let arguments = if json.is_empty() {
                    match start_input {
                        Some(input) => RawArguments::Value(input),
                        None => RawArguments::Implied(serde_json::Value::Null),
                    }
                } else {
                    RawArguments::Text(Cow::Owned(json))
                };
                tool_calls.push(RawToolCall {
                    name: Cow::Borrowed(name),
                    id: id.map(Cow::Borrowed),
                    arguments,
                });
            }
            Block::Ignored => {}
        }
    }
    Ok(Turn {
        text: Cow::Owned(text),
        tool_calls,
        stop,
    })
}

fn index(data: Object<'_>, p: At<'_>) -> Result<usize, ProviderError> {
    data.get("index")
        .and_then(|v| v.as_u64())
        .and_then(|i| usize::try_from(i).ok())
        .ok_or_else(|| malformed(p.key("index"), "expected a block index"))
}
