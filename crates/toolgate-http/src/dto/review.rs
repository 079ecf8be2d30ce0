//! The reviewer queue's bodies: items, votes and actions.

use toolgate::review::{ItemStatus, Verdict};

use super::*;

/// One reviewer's vote on an approval item.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewVote {
    /// The reviewer (their key's principal).
    pub reviewer: String,
    /// `approve` or `deny`.
    #[schema(value_type = String)]
    pub verdict: Verdict,
    /// When (Unix ms).
    pub at: i64,
    /// Their note.
    pub note: Option<String>,
}

/// A reviewer item, as stored in the claim database.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewItemView {
    /// The item id: never reused, restarts included.
    pub id: u64,
    /// When it was recorded (Unix ms).
    pub at: i64,
    /// The decision's outcome that put it in the queue.
    #[schema(value_type = String)]
    pub kind: Outcome,
    /// The tool.
    pub tool: Option<String>,
    /// The principal whose proposal it is.
    pub proposer: String,
    /// The key that named the proposer (actor delegation).
    pub proposer_via: Option<String>,
    /// Where it stands (an expiry is applied when it is read).
    pub status: ItemStatus,
    /// The operation key (hex); for `needs_reconciliation` the claim to
    /// reconcile (`/v1/claims/{key}`).
    pub operation_key: Option<String>,
    /// Approval items: distinct approvers needed.
    pub approvals_needed: u32,
    /// Approval items: when the request, and an approval, expire (Unix ms).
    pub expires_at: Option<i64>,
    /// Approval items: when the proposer's retry used the approval.
    pub consumed_at: Option<i64>,
    /// Approval items: the principal whose claim used the approval (always
    /// the proposer: an approval serves no one else).
    pub consumed_by: Option<String>,
    /// Approval items: the votes so far.
    pub votes: Vec<ReviewVote>,
    /// The reviewer who closed it (last approver, denier, resolver).
    pub by: Option<String>,
    /// When it was closed (Unix ms).
    pub closed_at: Option<i64>,
    /// The closing note.
    pub note: Option<String>,
    /// The decision as sent, with the new proposal's `arguments`. In a
    /// listing at most 2 KiB of JSON: a larger one is summarised (outcome,
    /// reason, tool, operation key, the start of the message,
    /// `"truncated": true`), and `GET /v1/review/items/{id}` has the whole
    /// of it (at most 16 KiB; larger ones were summarised when recorded).
    #[schema(value_type = Object)]
    pub decision: Value,
}

/// `GET /v1/review/items/{id}`: one item with its whole decision.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewItemResponse {
    /// The item.
    pub item: ReviewItemView,
}

/// `GET /v1/review/items`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewItems {
    /// Newest first.
    pub items: Vec<ReviewItemView>,
    /// Pass as `before` for the next page; absent on the last one.
    pub next_before: Option<u64>,
}

/// The answer to an approve, deny, resolve or dismiss: the item as it now
/// stands. Approving never runs the proposal and carries no permit: the
/// proposer's own retry proceeds.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewActionResponse {
    /// The item after the action (`open` while more approvers are needed).
    pub item: ReviewItemView,
}

/// `note`: at most [`MAX_NOTE_BYTES`](toolgate::review::MAX_NOTE_BYTES)
/// bytes. The schema's `maxLength` counts characters, so it is the byte
/// limit: a longer text is always refused, and a text of that many
/// characters passes whenever they are ASCII.
fn note_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .max_length(Some(toolgate::review::MAX_NOTE_BYTES))
        .description(Some(
            "A note kept with the vote or closing: at most 2000 bytes of UTF-8 (maxLength counts \
             characters, so a note of non-ASCII text reaches the limit sooner)",
        ))
}

/// An optional body for a review action.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewActionRequest {
    /// A note kept with the vote or closing (at most 2000 bytes).
    #[schema(schema_with = note_schema)]
    pub note: Option<String>,
}
