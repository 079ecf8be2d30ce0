//! OpenAI Responses: `status`, `incomplete_details.reason`, and `output`
//! items (`message` with `output_text`/`refusal` parts, `function_call`).

use std::borrow::Cow;

use super::sse::Event;
use super::{
    At, ProviderError, RawArguments, RawToolCall, Stop, StopClass, Turn, array, field, fields,
    member, object, push_text, raw_stop,
};
use crate::decode::Json;

/// A complete response object.
pub(super) fn parse<'t>(body: Json<'t>) -> Result<Turn<'t>, ProviderError> {
    parse_at(body, At::ROOT)
}

fn parse_at<'t>(body: Json<'t>, p: At<'_>) -> Result<Turn<'t>, ProviderError> {
    let resp = object(body, p)?;
    // `error` is read only for a failed response, below.
    let [status, details, output] = fields(resp, ["status", "incomplete_details", "output"]);
    let status = status.opt_str(p)?;
    let reason = details
        .get()
        .and_then(|d| d.get("reason"))
        .and_then(|v| v.as_str());
    let op = p.key("output");
    let output = array(output.required(p)?, op)?;
    let mut text = Cow::Borrowed("");
    let mut refusal: Option<String> = None;
    let mut tool_calls = Vec::new();
    for (i, item) in output.iter().enumerate() {
        let ip = op.index(i);
        let item = object(item, ip)?;
        let [kind, content, name, call_id, id, arguments] = fields(
            item,
            ["type", "content", "name", "call_id", "id", "arguments"],
        );
        match kind.req_str(ip)? {
            "message" => {
                let cp = ip.key("content");
                let content = array(content.required(ip)?, cp)?;
                for (j, part) in content.iter().enumerate() {
                    let pp = cp.index(j);
                    let part = object(part, pp)?;
                    let [kind, text_part, refusal_part] = fields(part, ["type", "text", "refusal"]);
                    match kind.req_str(pp)? {
                        "output_text" => push_text(&mut text, text_part.req_str(pp)?),
                        "refusal" => refusal
                            .get_or_insert_with(String::new)
                            .push_str(refusal_part.req_str(pp)?),
                        other => {
                            return Err(super::malformed(
                                pp.key("type"),
                                format!("content part type {other:?} is not supported"),
                            ));
                        }
                    }
                }
            }
            "function_call" => tool_calls.push(RawToolCall {
                name: Cow::Borrowed(name.req_str(ip)?),
                // `call_id` is what a follow-up `function_call_output` quotes;
                // `id` is the item's own id.
                id: call_id.opt_str(ip)?.or(id.opt_str(ip)?).map(Cow::Borrowed),
                arguments: RawArguments::Text(Cow::Borrowed(arguments.req_str(ip)?)),
            }),
            "reasoning" => {}
            other => {
                return Err(super::malformed(
                    ip.key("type"),
                    format!("output item type {other:?} is not supported"),
                ));
            }
        }
    }
    let stop = if let Some(r) = refusal {
        let mut stop = Stop::new(StopClass::Refused, status.map(raw_stop));
        stop.explanation = Some(r);
        stop
    } else {
        match (status, reason) {
            (Some("completed"), _) if !tool_calls.is_empty() => {
                Stop::new(StopClass::ToolUse, Some("completed".into()))
            }
            (Some("completed"), _) => Stop::new(StopClass::Complete, Some("completed".into())),
            (Some("incomplete"), Some("max_output_tokens")) => Stop::new(
                StopClass::Truncated,
                Some("incomplete:max_output_tokens".into()),
            ),
            (Some("incomplete"), Some("content_filter")) => Stop::new(
                StopClass::ContentFiltered,
                Some("incomplete:content_filter".into()),
            ),
            (Some(s), r) => {
                // `failed`, `cancelled`, `in_progress`, `queued`, or an
                // incomplete reason toolgate does not know: fail closed.
                let mut stop = Stop::new(
                    StopClass::Unknown,
                    Some(match r {
                        Some(r) => format!("{s}:{r}").into(),
                        None => raw_stop(s),
                    }),
                );
                stop.explanation = resp
                    .get("error")
                    .and_then(|e| e.get("message"))
                    .and_then(|v| v.as_str())
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
pub(super) fn parse_stream<'t>(events: &'t [Event<'t>]) -> Result<Turn<'t>, ProviderError> {
    let all = At::ROOT.key("events");
    for (n, ev) in events.iter().enumerate().rev() {
        let p = all.index(n);
        let Some(data) = &ev.data else { continue };
        let data = object(data.root(), p)?;
        let kind = field(data, "type").opt_str(p)?.or(ev.name);
        match kind {
            Some("response.completed" | "response.incomplete" | "response.failed") => {
                return parse_at(member(data, "response", p)?, p.key("response"));
            }
            Some("error") => {
                let mut stop = Stop::new(StopClass::Unknown, Some("error".into()));
                stop.explanation = data
                    .get("message")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned);
                return Ok(Turn::stopped(stop));
            }
            _ => {}
        }
    }
    if events.is_empty() {
        return Err(super::malformed(all, "empty stream"));
    }
    Ok(Turn::stopped(Stop::new(
        StopClass::Truncated,
        Some("stream_cut".into()),
    )))
}
