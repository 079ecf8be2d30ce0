//! Anthropic Messages: `content` blocks, `stop_reason`, `stop_details`.

use serde_json::{Map, Value};

use super::sse::Event;
use super::{
    ProviderError, RawArguments, RawToolCall, Stop, StopClass, Turn, array, malformed, object,
    opt_str, req_str,
};

fn classify(stop_reason: Option<&str>, details: Option<&Map<String, Value>>) -> Stop {
    let class = match stop_reason {
        Some("end_turn" | "stop_sequence") => StopClass::Complete,
        Some("tool_use") => StopClass::ToolUse,
        Some("max_tokens" | "model_context_window_exceeded") => StopClass::Truncated,
        Some("refusal") => StopClass::Refused,
        // `pause_turn` (a server tool paused a long turn) and anything newer
        // mean the turn is not a finished proposal.
        _ => StopClass::Unknown,
    };
    let mut stop = Stop::new(class, stop_reason.map(str::to_owned));
    if let Some(d) = details {
        stop.category = d.get("category").and_then(Value::as_str).map(str::to_owned);
        stop.explanation = d
            .get("explanation")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    stop
}

/// A complete (non-stream) Messages response.
pub(super) fn parse(body: &Value) -> Result<Turn, ProviderError> {
    let msg = object(body, "")?;
    if let Some(kind) = opt_str(msg, "type", "")?
        && kind != "message"
    {
        return Err(malformed(
            "/type",
            format!("expected \"message\", got {kind:?}"),
        ));
    }
    let stop_reason = opt_str(msg, "stop_reason", "")?;
    let details = msg.get("stop_details").and_then(Value::as_object);
    let stop = classify(stop_reason, details);
    let content = array(
        msg.get("content")
            .ok_or_else(|| malformed("/content", "missing"))?,
        "/content",
    )?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (i, block) in content.iter().enumerate() {
        let p = format!("/content/{i}");
        let block = object(block, &p)?;
        match req_str(block, "type", &p)? {
            "text" => text.push_str(req_str(block, "text", &p)?),
            "tool_use" => tool_calls.push(RawToolCall {
                name: req_str(block, "name", &p)?.to_owned(),
                id: opt_str(block, "id", &p)?.map(str::to_owned),
                arguments: RawArguments::Value(
                    block
                        .get("input")
                        .cloned()
                        .ok_or_else(|| malformed(&format!("{p}/input"), "missing"))?,
                ),
            }),
            "thinking" | "redacted_thinking" => {}
            other => {
                return Err(malformed(
                    &format!("{p}/type"),
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
enum Block {
    Text(String),
    Tool {
        name: String,
        id: Option<String>,
        json: String,
        /// `content_block_start` may carry a non-empty `input` (it normally
        /// carries `{}` and the deltas bring the JSON).
        start_input: Value,
    },
    Ignored,
}

/// A Messages stream: `message_start`, `content_block_start/delta/stop`,
/// `message_delta` (the stop reason), `message_stop`.
pub(super) fn parse_stream(events: &[Event]) -> Result<Turn, ProviderError> {
    let mut blocks: Vec<(Block, bool)> = Vec::new();
    let mut stop_reason: Option<String> = None;
    let mut details: Option<Map<String, Value>> = None;
    let mut saw_start = false;
    let mut saw_stop = false;
    for (n, ev) in events.iter().enumerate() {
        let p = format!("/events/{n}");
        let Some(data) = &ev.data else { continue };
        let data = object(data, &p)?;
        match req_str(data, "type", &p)? {
            "message_start" => {
                saw_start = true;
                if let Some(m) = data.get("message").and_then(Value::as_object)
                    && let Some(r) = m.get("stop_reason").and_then(Value::as_str)
                {
                    stop_reason = Some(r.to_owned());
                }
            }
            "content_block_start" => {
                let index = index(data, &p)?;
                if index != blocks.len() {
                    return Err(malformed(
                        &format!("{p}/index"),
                        "content blocks out of order",
                    ));
                }
                let cb = object(
                    data.get("content_block")
                        .ok_or_else(|| malformed(&format!("{p}/content_block"), "missing"))?,
                    &format!("{p}/content_block"),
                )?;
                let cp = format!("{p}/content_block");
                let block = match req_str(cb, "type", &cp)? {
                    "text" => Block::Text(opt_str(cb, "text", &cp)?.unwrap_or("").to_owned()),
                    "tool_use" => Block::Tool {
                        name: req_str(cb, "name", &cp)?.to_owned(),
                        id: opt_str(cb, "id", &cp)?.map(str::to_owned),
                        json: String::new(),
                        start_input: cb.get("input").cloned().unwrap_or(Value::Null),
                    },
                    "thinking" | "redacted_thinking" => Block::Ignored,
                    other => {
                        return Err(malformed(
                            &format!("{cp}/type"),
                            format!("content block type {other:?} is not supported"),
                        ));
                    }
                };
                blocks.push((block, false));
            }
            "content_block_delta" => {
                let index = index(data, &p)?;
                let dp = format!("{p}/delta");
                let delta = object(
                    data.get("delta").ok_or_else(|| malformed(&dp, "missing"))?,
                    &dp,
                )?;
                let Some((block, _)) = blocks.get_mut(index) else {
                    return Err(malformed(
                        &format!("{p}/index"),
                        "delta for a block never started",
                    ));
                };
                match (block, req_str(delta, "type", &dp)?) {
                    (Block::Text(t), "text_delta") => t.push_str(req_str(delta, "text", &dp)?),
                    (Block::Tool { json, .. }, "input_json_delta") => {
                        json.push_str(req_str(delta, "partial_json", &dp)?);
                    }
                    (Block::Ignored, _) | (_, "citations_delta") => {}
                    (_, other) => {
                        return Err(malformed(
                            &format!("{dp}/type"),
                            format!("delta type {other:?} does not fit its block"),
                        ));
                    }
                }
            }
            "content_block_stop" => {
                let index = index(data, &p)?;
                match blocks.get_mut(index) {
                    Some((_, stopped)) => *stopped = true,
                    None => {
                        return Err(malformed(
                            &format!("{p}/index"),
                            "stop for a block never started",
                        ));
                    }
                }
            }
            "message_delta" => {
                if let Some(d) = data.get("delta").and_then(Value::as_object) {
                    if let Some(r) = d.get("stop_reason").and_then(Value::as_str) {
                        stop_reason = Some(r.to_owned());
                    }
                    if let Some(sd) = d.get("stop_details").and_then(Value::as_object) {
                        details = Some(sd.clone());
                    }
                }
            }
            "message_stop" => saw_stop = true,
            "ping" => {}
            "error" => {
                let message = data
                    .get("error")
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("stream error")
                    .to_owned();
                let mut stop = Stop::new(StopClass::Unknown, Some("error".to_owned()));
                stop.explanation = Some(message);
                return Ok(Turn {
                    text: String::new(),
                    tool_calls: Vec::new(),
                    stop,
                });
            }
            // New event types are additive in Anthropic's versioning policy.
            _ => {}
        }
    }
    if !saw_start {
        return Err(malformed("/events", "no message_start event"));
    }
    let complete = saw_stop && blocks.iter().all(|(_, stopped)| *stopped);
    let mut stop = classify(stop_reason.as_deref(), details.as_ref());
    if !complete && stop.class != StopClass::Truncated {
        // The stream was cut: whatever the last stop value said, nothing in
        // it is whole. (A `max_tokens` stream keeps its own raw value.)
        stop = Stop::new(StopClass::Truncated, Some("stream_cut".to_owned()));
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
                    RawArguments::Value(start_input)
                } else {
                    RawArguments::Text(json)
                };
                tool_calls.push(RawToolCall {
                    name,
                    id,
                    arguments,
                });
            }
            Block::Ignored => {}
        }
    }
    Ok(Turn {
        text,
        tool_calls,
        stop,
    })
}

fn index(data: &Map<String, Value>, p: &str) -> Result<usize, ProviderError> {
    data.get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .ok_or_else(|| malformed(&format!("{p}/index"), "expected a block index"))
}
