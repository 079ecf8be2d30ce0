//! `toolgate demo`'s world: the agents, customer and tickets it seeds, and
//! the recorded provider bodies its story sends (compiled in, so the demo
//! runs from any directory). The story itself, and its checks, are the
//! command's (`toolgate-cli`'s `cmd/demo.rs`).

/// Raw provider bodies, compiled in so the demo runs from any directory.
pub mod body {
    /// An answer, no action (Anthropic).
    pub const ANSWER: &[u8] = include_bytes!("../../../fixtures/providers/anthropic/answer.json");
    /// An empty turn: an abstention (Gemini).
    pub const ABSTAIN: &[u8] =
        include_bytes!("../../../fixtures/providers/gemini/abstain-empty-turn.json");
    /// A 15.00 `late_delivery` credit, per provider (the main story and
    /// the race).
    pub const ACTION_ANTHROPIC: &[u8] =
        include_bytes!("../../../fixtures/providers/anthropic/action.json");
    pub const ACTION_OPENAI_CHAT: &[u8] =
        include_bytes!("../../../fixtures/providers/openai-chat/action.json");
    pub const ACTION_OPENAI_RESPONSES: &[u8] =
        include_bytes!("../../../fixtures/providers/openai-responses/action.json");
    pub const ACTION_GEMINI: &[u8] =
        include_bytes!("../../../fixtures/providers/gemini/action.json");
    /// The same credit, reworded, from another provider: a replay.
    pub const REWORDED: &[u8] = include_bytes!("../demo/reworded-retry.gemini.json");
    /// 20.00 on the same version: a conflict.
    pub const DIFFERENT_AMOUNT: &[u8] = include_bytes!("../demo/different-amount.openai-chat.json");
    /// A provider refusal.
    pub const REFUSAL: &[u8] =
        include_bytes!("../../../fixtures/providers/openai-chat/refusal.json");
    /// A response cut off at the output limit.
    pub const TRUNCATED: &[u8] = include_bytes!(
        "../../../fixtures/providers/openai-responses/truncated-max-output-tokens.json"
    );
    /// A credit whose arguments add `approved_by`: rejected.
    pub const APPROVED_BY: &[u8] =
        include_bytes!("../../../fixtures/providers/anthropic/approved-by.json");
}

/// The agent of the main story, who holds `credit:issue`.
pub const ANA: &str = "agent-ana";
/// An agent the demo sends without `credit:issue`.
pub const BEN: &str = "agent-ben";
/// The agent the main ticket is reassigned to.
pub const CHO: &str = "agent-cho";
/// The customer of all three tickets.
pub const CUSTOMER: &str = "cus-42";
/// The ticket of the main story: credited, retried, conflicted, reassigned.
pub const TICKET: &str = "t-100";
/// The ticket twelve parallel proposals race for.
pub const RACE_TICKET: &str = "t-200";
/// The same customer's third ticket: a 20.00 credit there, after 15.00 on
/// each of the two others, passes the policy's 40.00 a day per customer.
pub const BUDGET_TICKET: &str = "t-300";
/// The version both tickets start at (what the model is shown).
pub const START_VERSION: i64 = 3;
