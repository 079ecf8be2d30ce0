//! Budgets in the policy (docs/design.md §15, docs/policy.md "Budgets"):
//! what loads, what is refused and where, and what `policy explain` says.

mod support;

use toolgate::contract::budget::{Over, Per, Window};
use toolgate::contract::{Policy, explain::explain};

pub(crate) fn policy(budgets: &str) -> String {
    format!(
        r#"
version = 1
abstain_message = "no"

[[tools]]
name = "credit"
capability = "credit:issue"
operation_key = ["customer_id", "ticket_id", "version_seen"]
schema = '''
{{ "type": "object", "additionalProperties": false,
   "required": ["amount_minor", "note"],
   "properties": {{
     "amount_minor": {{ "type": "integer", "minimum": 1, "maximum": 2000 }},
     "optional_minor": {{ "type": "integer", "minimum": 1, "maximum": 2000 }},
     "unbounded_minor": {{ "type": "integer", "minimum": 1 }},
     "note": {{ "type": "string", "maxLength": 10 }}
   }} }}
'''
{budgets}
"#
    )
}

pub(crate) const DAILY: &str = r#"
[[tools.budgets]]
name = "daily_credit_per_customer"
amount = "/amount_minor"
per = ["customer_id"]
window = "day"
limit = 5000
over = "pending_approval"
"#;

fn refused(budgets: &str) -> String {
    Policy::load(&policy(budgets))
        .expect_err("the policy must be refused")
        .to_string()
}

#[test]
fn a_budget_loads_as_written() {
    let p = Policy::load(&policy(
        &(DAILY.to_owned()
            + r#"
[[tools.budgets]]
name = "monthly_per_actor"
amount = "/amount_minor"
per = ["actor", "customer_id"]
window = "month"
limit = 100000
over = "rejected"
"#),
    ))
    .unwrap();
    let b = p.tool("credit").unwrap().budgets();
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].name(), "daily_credit_per_customer");
    assert_eq!(b[0].amount_pointer(), "/amount_minor");
    assert_eq!(b[0].per(), &[Per::Scope("customer_id".to_owned())]);
    assert_eq!(b[0].window(), Window::Day);
    assert_eq!(b[0].limit(), 5000);
    assert_eq!(b[0].over(), Over::PendingApproval);
    assert_eq!((b[0].amount_minimum(), b[0].amount_maximum()), (1, 2000));
    assert_eq!(
        b[1].per(),
        &[Per::Actor, Per::Scope("customer_id".to_owned())]
    );
    assert_eq!(b[1].window(), Window::Month);
    assert_eq!(b[1].over(), Over::Rejected);
    assert_eq!(
        b[0].amount_of(&serde_json::json!({"amount_minor": 1500, "note": "x"})),
        Some(1500)
    );
}

#[test]
fn loading_refuses_bad_budgets_with_their_location() {
    let with = |field: &str, value: &str| {
        DAILY
            .lines()
            .map(|l| {
                if l.starts_with(&format!("{field} = ")) {
                    format!("{field} = {value}")
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let cases = [
        (
            with("amount", "\"/note\""),
            "budgets[0] daily_credit_per_customer: amount",
            "not an integer property",
        ),
        (
            with("amount", "\"/missing\""),
            ": amount",
            "names no property",
        ),
        (
            with("amount", "\"/unbounded_minor\""),
            ": amount",
            "no integer \"maximum\"",
        ),
        (
            with("amount", "\"/optional_minor\""),
            ": amount",
            "must be required",
        ),
        (
            with("amount", "\"amount_minor\""),
            ": amount",
            "not a pointer",
        ),
        (
            with("per", "[\"order_id\"]"),
            ": per",
            "`order_id` is neither \"actor\" nor a scope field",
        ),
        (with("per", "[]"), ": per", "at least one"),
        (with("limit", "0"), ": limit", "positive"),
        (with("limit", "-5"), ": limit", "positive"),
        (
            with("window", "\"week\""),
            ": window",
            "unknown window \"week\"",
        ),
        (with("over", "\"allowed\""), ": over", "unknown outcome"),
        (
            DAILY.to_owned() + DAILY,
            "budgets[1] daily_credit_per_customer: name",
            "declared twice",
        ),
    ];
    for (budgets, location, message) in cases {
        let e = refused(&budgets);
        assert!(e.starts_with("tools[0] credit: "), "{e}");
        assert!(e.contains(location), "{e} lacks {location}");
        assert!(e.contains(message), "{e} lacks {message}");
    }
    // An unknown key in the table is a TOML error with its line.
    let e = refused(&(DAILY.to_owned() + "hard = true\n"));
    assert!(e.contains("unknown field `hard`"), "{e}");
}

#[test]
fn a_budget_name_names_one_budget_in_the_policy() {
    let one = policy(DAILY);
    let two = one.clone()
        + &one[one.find("[[tools]]").unwrap()..].replace("name = \"credit\"", "name = \"credit2\"");
    let e = Policy::load(&two).unwrap_err().to_string();
    assert!(
        e.contains("budget `daily_credit_per_customer` is declared by two tools"),
        "{e}"
    );
}

#[test]
fn the_digest_covers_budgets() {
    let without = Policy::load(&policy("")).unwrap();
    let with = Policy::load(&policy(DAILY)).unwrap();
    let higher = Policy::load(&policy(&DAILY.replace("5000", "6000"))).unwrap();
    let d = |p: &Policy| p.tool("credit").unwrap().digest().to_owned();
    assert_ne!(d(&without), d(&with));
    assert_ne!(d(&with), d(&higher));
}

#[test]
fn explain_states_the_worst_case_per_budget() {
    let p = Policy::load(&policy(DAILY)).unwrap();
    let e = &explain(&p)[0];
    let line = e
        .bounds
        .iter()
        .find(|b| b.starts_with("budget daily_credit_per_customer"))
        .expect("a line for the budget");
    assert_eq!(
        line,
        "budget daily_credit_per_customer: at most 5000 in amount_minor per customer_id per UTC day ([start, end) by the claim's attempt time), reached in 3 calls of up to 2000 (at most 5000 calls fit); over it: pending_approval"
    );
    let none = Policy::load(&policy("")).unwrap();
    assert!(
        explain(&none)[0]
            .bounds
            .iter()
            .any(|b| b.starts_with("budgets: none"))
    );
}

// --- Through the pipeline (docs/design.md §15), on the memory store. ---

mod pipeline {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use serde_json::{Map, Value, json};
    use toolgate::claim::GrantUse;
    use toolgate::claim::{
        ClaimRecord, ClaimStore, HolderToken, JsonText, MemoryClaimStore, UnixMillis,
    };
    use toolgate::contract::{self, CheckOptions, Policy};
    use toolgate::pipeline::{
        Approval, Authorizer, AuthzDecision, AuthzRequest, Decision, ExecError, ExecOutcome,
        ExecPermit, Executor, Gate, Outcome, Principal, Reason, Request, StateError, StateScope,
        StateSource, StateVersion, decide,
    };
    use toolgate::provider::Provider;
    use toolgate::review::{
        ApprovalTerms, ItemStatus, NewItem, QueueLimits, Requested, ReviewStore, Voted,
    };

    use crate::support::{approval_request, approve};

    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("the memory store never pends"),
        }
    }

    struct Allow;
    impl Authorizer for Allow {
        fn authorize(&self, _: &AuthzRequest<'_>) -> impl Future<Output = AuthzDecision> + Send {
            std::future::ready(AuthzDecision::Allow)
        }
    }

    /// Every ticket at version 7.
    struct Seven;
    impl StateSource for Seven {
        fn current_version(
            &self,
            _: StateScope<'_>,
        ) -> impl Future<Output = Result<StateVersion, StateError>> + Send {
            std::future::ready(Ok(StateVersion::from(7)))
        }
    }

    /// Applies a credit when the ticket is still at `current`, else reports
    /// the failed precondition (the ticket changed after the state read).
    struct Ledger {
        current: AtomicI64,
        applied: Mutex<Vec<i64>>,
    }
    impl Executor for Ledger {
        fn execute(
            &self,
            permit: ExecPermit<'_>,
        ) -> impl Future<Output = Result<ExecOutcome, ExecError>> + Send {
            let current = self.current.load(Ordering::SeqCst);
            let out = if permit.precondition().as_str() == current.to_string() {
                let amount = permit.arguments()["amount_minor"].as_i64().unwrap();
                self.applied.lock().unwrap().push(amount);
                ExecOutcome::Applied {
                    receipt: JsonText::result(json!({"applied": true}).to_string()).unwrap(),
                }
            } else {
                ExecOutcome::PreconditionFailed {
                    current: Some(StateVersion::from(current)),
                }
            };
            std::future::ready(Ok(out))
        }
        fn reconcile(
            &self,
            _: &ClaimRecord,
        ) -> impl Future<Output = Result<toolgate::claim::ReconcileOutcome, ExecError>> + Send
        {
            std::future::ready(Err(ExecError::new("not asked in these tests")))
        }
    }

    struct Desk {
        policy: Policy,
        store: MemoryClaimStore,
        exec: Ledger,
        holders: Mutex<u8>,
    }

    impl Desk {
        fn new(over: &str) -> Self {
            Desk {
                policy: Policy::load(&super::policy(
                    &super::DAILY
                        .replace("over = \"pending_approval\"", &format!("over = \"{over}\"")),
                ))
                .unwrap(),
                store: MemoryClaimStore::new(),
                exec: Ledger {
                    current: AtomicI64::new(7),
                    applied: Mutex::default(),
                },
                holders: Mutex::new(0),
            }
        }

        fn credit(&self, customer: &str, ticket: &str, amount: i64, now: i64) -> Decision {
            self.credit_with(customer, ticket, amount, now, None)
        }

        fn credit_with(
            &self,
            customer: &str,
            ticket: &str,
            amount: i64,
            now: i64,
            approval: Option<&Approval>,
        ) -> Decision {
            let body = json!({"outcome": "action", "reply": "Done.",
                "proposed_action": {"tool": "credit",
                    "arguments": {"amount_minor": amount, "note": "late"}}});
            let proposal = contract::check(
                &self.policy,
                Provider::Envelope,
                body.to_string().as_bytes(),
                &CheckOptions::default(),
            );
            assert_eq!(
                proposal.outcome(),
                contract::CheckOutcome::Action,
                "{proposal:?}"
            );
            let mut scope = Map::new();
            scope.insert("customer_id".into(), Value::from(customer));
            scope.insert("ticket_id".into(), Value::from(ticket));
            let principal = Principal::new("agent-1", ["credit:issue"]).unwrap();
            let seen = StateVersion::from(7);
            let holder = {
                let mut n = self.holders.lock().unwrap();
                *n += 1;
                HolderToken::from_bytes([*n; 16])
            };
            let gate = Gate {
                policy: &self.policy,
                authorizer: &Allow,
                state: &Seven,
                claims: &self.store,
                executor: &self.exec,
            };
            let request = Request {
                principal: &principal,
                scope: &toolgate::pipeline::Scope::new(scope.clone(), Some(seen.clone())),
                attributes: &Map::new(),
                approval,
                now: UnixMillis(now),
                holder,
                lease: Duration::from_secs(30),
            };
            block_on(decide(&gate, proposal, &request)).unwrap()
        }
    }

    // 2026-03-01T10:00:00Z and the day's last and the next day's first instants.
    const MORNING: i64 = 1_772_359_200_000;
    const DAY_END: i64 = 1_772_409_599_999;
    const NEXT_DAY: i64 = 1_772_409_600_000;

    #[test]
    fn the_third_credit_over_the_cap_goes_to_a_person_with_the_budget() {
        let desk = Desk::new("pending_approval");
        for ticket in ["t-1", "t-2"] {
            let d = desk.credit("cus-42", ticket, 2000, MORNING);
            assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
        }
        let d = desk.credit("cus-42", "t-3", 1500, MORNING);
        assert_eq!(d.outcome(), Outcome::PendingApproval, "{d:?}");
        assert_eq!(d.reason(), Some(Reason::BudgetExceeded));
        assert_eq!(
            d.to_json()["budget"],
            json!({"name": "daily_credit_per_customer", "limit": 5000, "used": 4000,
                   "remaining": 1000, "amount": 1500})
        );
        for (customer, ticket, amount, at, outcome) in [
            // Nothing was claimed: the same proposal asks again, and what
            // fits goes.
            ("cus-42", "t-3", 1500, MORNING, Outcome::PendingApproval),
            ("cus-42", "t-4", 1000, MORNING, Outcome::Executed),
            // A replay of an executed credit reserves nothing more.
            ("cus-42", "t-1", 2000, MORNING, Outcome::Replayed),
            // Another customer has a budget of its own.
            ("cus-7", "t-5", 2000, MORNING, Outcome::Executed),
            // The day's last millisecond still counts in the day; the next
            // day is new.
            ("cus-42", "t-6", 1, DAY_END, Outcome::PendingApproval),
            ("cus-42", "t-6", 2000, NEXT_DAY, Outcome::Executed),
        ] {
            let d = desk.credit(customer, ticket, amount, at);
            assert_eq!(d.outcome(), outcome, "{customer} {ticket} {amount}: {d:?}");
        }
        assert_eq!(
            *desk.exec.applied.lock().unwrap(),
            [2000, 2000, 1000, 2000, 2000]
        );
    }

    #[test]
    fn a_rejecting_budget_rejects_and_a_failed_precondition_gives_the_amount_back() {
        let desk = Desk::new("rejected");
        assert_eq!(
            desk.credit("cus-42", "t-1", 2000, MORNING).outcome(),
            Outcome::Executed
        );
        // The ticket changes between the state read and the write: nothing
        // is written, and the 2000 reserved for t-2 is given back.
        desk.exec.current.store(8, Ordering::SeqCst);
        let d = desk.credit("cus-42", "t-2", 2000, MORNING);
        assert_eq!(d.reason(), Some(Reason::PreconditionFailed), "{d:?}");
        desk.exec.current.store(7, Ordering::SeqCst);
        assert_eq!(
            desk.credit("cus-42", "t-3", 2000, MORNING).outcome(),
            Outcome::Executed
        );
        let d = desk.credit("cus-42", "t-4", 1001, MORNING);
        assert_eq!(
            (d.outcome(), d.reason()),
            (Outcome::Rejected, Some(Reason::BudgetExceeded)),
            "{d:?}"
        );
        assert_eq!(
            d.budget().map(|b| (b.used, b.remaining)),
            Some((4000, 1000))
        );
        assert_eq!(
            desk.credit("cus-42", "t-4", 1000, MORNING).outcome(),
            Outcome::Executed
        );
    }

    #[test]
    fn an_approval_lets_the_proposal_reserve_beyond_the_limit() {
        let desk = Desk::new("pending_approval");
        for ticket in ["t-1", "t-2"] {
            assert_eq!(
                desk.credit("cus-42", ticket, 2000, MORNING).outcome(),
                Outcome::Executed
            );
        }
        let d = desk.credit("cus-42", "t-3", 2000, MORNING);
        assert_eq!(d.reason(), Some(Reason::BudgetExceeded), "{d:?}");
        // A person approves exactly this proposal (the review flow).
        let (key, fingerprint) = (d.key().unwrap(), d.fingerprint().unwrap());
        let digest = desk.policy.tool("credit").unwrap().digest().to_owned();
        let ask = NewItem {
            reason: Some(toolgate::pipeline::Reason::BudgetExceeded),
            ..approval_request(
                "credit",
                key,
                fingerprint,
                UnixMillis(MORNING),
                ApprovalTerms {
                    policy_digest: digest.clone(),
                    approvers: 1,
                    expires_at: UnixMillis(MORNING + 60_000),
                },
            )
        };
        let Requested::Pending { item, .. } = block_on(desk.store.request_approval(
            ask,
            UnixMillis(MORNING),
            &QueueLimits::default(),
        ))
        .unwrap() else {
            panic!("opens an item")
        };
        assert_eq!(
            approve(&desk.store, item, "lead", UnixMillis(MORNING)),
            Voted::Recorded(ItemStatus::Approved)
        );
        let approval = Approval {
            key,
            fingerprint,
            version: StateVersion::from(7),
            grant: GrantUse {
                item,
                policy_digest: digest,
            },
        };
        let d = desk.credit_with("cus-42", "t-3", 2000, MORNING + 1, Some(&approval));
        assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
        assert_eq!(d.reason(), Some(Reason::BudgetExceededApproved));
        let trail = block_on(desk.store.audit_trail(&key, 10)).unwrap();
        assert_eq!(
            trail.last().map(|e| (e.outcome(), e.reason())),
            Some(("executed", Some("budget_exceeded_approved")))
        );
        // 6000 of 5000 now: the next proposal, however small, goes to a person.
        let d = desk.credit("cus-42", "t-4", 1, MORNING + 2);
        assert_eq!(
            d.budget().map(|b| (b.used, b.remaining)),
            Some((6000, 0)),
            "{d:?}"
        );
        // The approval was used once: the same grant cannot carry another claim.
        let d = desk.credit_with("cus-42", "t-3", 2000, MORNING + 3, Some(&approval));
        assert_eq!(d.outcome(), Outcome::Replayed, "{d:?}");
        assert_eq!(*desk.exec.applied.lock().unwrap(), [2000, 2000, 2000]);
    }
}
