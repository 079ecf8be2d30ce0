//! OpenAI Responses: `status`, `incomplete_details.reason`, and `output`
//! items (`message` with `output_text`/`refusal` parts, `function_call`).

use serde_json::Value;

use super::sse::Event;
use super::{
    ProviderError, RawArguments, RawToolCall, Stop, StopClass, Turn, array, malformed, object,
    opt_str, req_str,
};

/// A complete response object.
pub(super) fn parse(body: &Value) -> Result<Turn, ProviderError> {
    parse_at(body, "")
}

fn parse_at(body: &Value, p: &str) -> Result<Turn, ProviderError> {
    let resp = object(body, p)?;
    let status = opt_str(resp, "status", p)?;
    let reason = resp
        .get("incomplete_details")
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str);
    let op = format!("{p}/output");
    let output = array(
        resp.get("output")
            .ok_or_else(|| malformed(&op, "missing"))?,
        &op,
    )?;
    let mut text = String::new();
    let mut refusal: Option<String> = None;
    let mut tool_calls = Vec::new();
    for (i, item) in output.iter().enumerate() {
        let ip = format!("{op}/{i}");
        let item = object(item, &ip)?;
        match req_str(item, "type", &ip)? {
            "message" => {
                let cp = format!("{ip}/content");
                let content = array(
                    item.get("content")
                        .ok_or_else(|| malformed(&cp, "missing"))?,
                    &cp,
                )?;
                for (j, part) in content.iter().enumerate() {
                    let pp = format!("{cp}/{j}");
                    let part = object(part, &pp)?;
                    match req_str(part, "type", &pp)? {
                        "output_text" => text.push_str(req_str(part, "text", &pp)?),
                        "refusal" => refusal
                            .get_or_insert_with(String::new)
                            .push_str(req_str(part, "refusal", &pp)?),
                        other => {
                            return Err(malformed(
                                &format!("{pp}/type"),
                                format!("content part type {other:?} is not supported"),
                            ));
                        }
                    }
                }
            }
            "function_call" => tool_calls.push(RawToolCall {
                name: req_str(item, "name", &ip)?.to_owned(),
                // `call_id` is what a follow-up `function_call_output` quotes;
                // `id` is the item's own id.
                id: opt_str(item, "call_id", &ip)?
                    .or(opt_str(item, "id", &ip)?)
                    .map(str::to_owned),
                arguments: RawArguments::Text(req_str(item, "arguments", &ip)?.to_owned()),
            }),
            "reasoning" => {}
            other => {
                return Err(malformed(
                    &format!("{ip}/type"),
                    format!("output item type {other:?} is not supported"),
                ));
            }
        }
    }
    let stop = if let Some(r) = refusal {
        let mut stop = Stop::new(StopClass::Refused, status.map(str::to_owned));
        stop.explanation = Some(r);
        stop
    } else {
        match (status, reason) {
            (Some("completed"), _) if !tool_calls.is_empty() => {
                Stop::new(StopClass::ToolUse, Some("completed".to_owned()))
            }
            (Some("completed"), _) => Stop::new(StopClass::Complete, Some("completed".to_owned())),
            (Some("incomplete"), Some("max_output_tokens")) => Stop::new(
                StopClass::Truncated,
                Some("incomplete:max_output_tokens".to_owned()),
            ),
            (Some("incomplete"), Some("content_filter")) => Stop::new(
                StopClass::ContentFiltered,
                Some("incomplete:content_filter".to_owned()),
            ),
            (Some(s), r) => {
                // `failed`, `cancelled`, `in_progress`, `queued`, or an
                // incomplete reason toolgate does not know: fail closed.
                let mut stop = Stop::new(
                    StopClass::Unknown,
                    Some(match r {
                        Some(r) => format!("{s}:{r}"),
                        None => s.to_owned(),
                    }),
                );
                stop.explanation = resp
                    .get("error")
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                stop
            }
            (None, _) => Stop::new(StopClass::Unknown, None),
        }
    };
    Ok(Turn {
        text,
        tool_calls,
        stop,
    })
}

/// A Responses stream. Its terminal event (`response.completed`,
/// `response.incomplete` or `response.failed`) carries the whole response
/// object, so that object is what gets classified; a stream without one was
/// cut and is truncated. The deltas before it are not needed.
pub(super) fn parse_stream(events: &[Event]) -> Result<Turn, ProviderError> {
    for (n, ev) in events.iter().enumerate().rev() {
        let p = format!("/events/{n}");
        let Some(data) = &ev.data else { continue };
        let data = object(data, &p)?;
        let kind = opt_str(data, "type", &p)?.or(ev.name.as_deref());
        match kind {
            Some("response.completed" | "response.incomplete" | "response.failed") => {
                let rp = format!("{p}/response");
                return parse_at(
                    data.get("response")
                        .ok_or_else(|| malformed(&rp, "missing"))?,
                    &rp,
                );
            }
            Some("error") => {
                let mut stop = Stop::new(StopClass::Unknown, Some("error".to_owned()));
                stop.explanation = data
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                return Ok(Turn {
                    text: String::new(),
                    tool_calls: Vec::new(),
                    stop,
                });
            }
            _ => {}
        }
    }
    if events.is_empty() {
        return Err(malformed("/events", "empty stream"));
    }
    Ok(Turn {
        text: String::new(),
        tool_calls: Vec::new(),
        stop: Stop::new(StopClass::Truncated, Some("stream_cut".to_owned())),
    })
}
