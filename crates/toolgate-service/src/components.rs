//! The gate's pluggable parts as trait objects.
//!
//! The core's component traits ([`Authorizer`], [`StateSource`],
//! [`ClaimStore`] with [`ReviewStore`] and [`IdempotencyStore`],
//! [`Executor`]) return `impl Future`, so none of them is dyn-compatible.
//! Making every door generic over them bred generic handlers, forwarding
//! layers and macros. Instead each has a boxed twin here (`Dyn*`, with a
//! blanket implementation for every implementor of the core trait) and a
//! cheap, cloneable handle ([`Authz`], [`State`], [`Store`], [`Exec`]) that
//! implements the core trait again by forwarding to the box. The core's
//! `decide` stays generic inside; the service and its doors see one
//! concrete type per part. One box per component call is noise next to a
//! decision's database round trips.
//!
//! [`Components`] is what a deployment hands the service: the four parts,
//! and how one proposal is decided over them. [`Parts`] is the plain one;
//! an application whose authoriser and state source share a read, or whose
//! write runs on the connection the decision claimed on,
//! implements [`Components`] itself with its concrete types inside.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest, Completion, ExecutorKind,
    OperationKey, RawClaim, ReconcileOutcome, ReconcileRequest, Reconciled, StoreError, StuckEntry,
    UnixMillis,
};
use toolgate::contract::{Checked, Policy};
use toolgate::idempotency::{Begun, Bounds, IdemBegin, IdemFinish, IdemRun, IdempotencyStore};
use toolgate::pipeline::{
    AppliedCompletion, Authorizer, AuthzDecision, AuthzRequest, Completed, Decision, ExecError,
    ExecOutcome, ExecPermit, Executor, Gate, GateError, Request, StateError, StateScope,
    StateSource, StateVersion, decide,
};
use toolgate::review::{
    Closed, Closing, ListQuery, NewItem, Opened, QueueLimits, Requested, ReviewItem, ReviewSession,
    ReviewStore, ReviewerAct, Verdict, Voted,
};

use crate::cap::ResultCap;

/// A boxed future that may move between threads.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`Authorizer`], boxed.
pub trait DynAuthorizer: Send + Sync {
    /// [`Authorizer::authorize`].
    fn authorize<'a>(&'a self, request: &'a AuthzRequest<'a>) -> BoxFuture<'a, AuthzDecision>;
    /// [`Authorizer::accepts_request_entity`].
    fn accepts_request_entity(&self, tool: &str, entity_type: &str) -> bool;
}

impl<T: Authorizer> DynAuthorizer for T {
    fn authorize<'a>(&'a self, request: &'a AuthzRequest<'a>) -> BoxFuture<'a, AuthzDecision> {
        Box::pin(Authorizer::authorize(self, request))
    }
    fn accepts_request_entity(&self, tool: &str, entity_type: &str) -> bool {
        Authorizer::accepts_request_entity(self, tool, entity_type)
    }
}

/// The authoriser, as the service holds it.
#[derive(Clone)]
pub struct Authz(Arc<dyn DynAuthorizer>);

impl Authz {
    /// Boxes `authorizer`.
    pub fn new(authorizer: impl Authorizer + 'static) -> Self {
        Self(Arc::new(authorizer))
    }

    /// An authoriser the caller keeps a typed handle to as well.
    pub fn shared<T: Authorizer + 'static>(authorizer: Arc<T>) -> Self {
        Self(authorizer)
    }
}

impl Authorizer for Authz {
    async fn authorize(&self, request: &AuthzRequest<'_>) -> AuthzDecision {
        self.0.authorize(request).await
    }
    fn accepts_request_entity(&self, tool: &str, entity_type: &str) -> bool {
        self.0.accepts_request_entity(tool, entity_type)
    }
}

/// [`StateSource`], boxed.
pub trait DynStateSource: Send + Sync {
    /// [`StateSource::current_version`].
    fn current_version<'a>(
        &'a self,
        scope: StateScope<'a>,
    ) -> BoxFuture<'a, Result<StateVersion, StateError>>;
    /// [`StateSource::reads_state`].
    fn reads_state(&self, tool: &str) -> bool;
}

impl<T: StateSource> DynStateSource for T {
    fn current_version<'a>(
        &'a self,
        scope: StateScope<'a>,
    ) -> BoxFuture<'a, Result<StateVersion, StateError>> {
        Box::pin(StateSource::current_version(self, scope))
    }
    fn reads_state(&self, tool: &str) -> bool {
        StateSource::reads_state(self, tool)
    }
}

/// The state source, as the service holds it.
#[derive(Clone)]
pub struct State(Arc<dyn DynStateSource>);

impl State {
    /// Boxes `state`.
    pub fn new(state: impl StateSource + 'static) -> Self {
        Self(Arc::new(state))
    }

    /// A state source the caller keeps a typed handle to as well.
    pub fn shared<T: StateSource + 'static>(state: Arc<T>) -> Self {
        Self(state)
    }
}

impl StateSource for State {
    async fn current_version(&self, scope: StateScope<'_>) -> Result<StateVersion, StateError> {
        self.0.current_version(scope).await
    }
    fn reads_state(&self, tool: &str) -> bool {
        self.0.reads_state(tool)
    }
}

/// [`Executor`], boxed.
pub trait DynExecutor: Send + Sync {
    /// [`Executor::execute`].
    fn execute<'a>(
        &'a self,
        permit: ExecPermit<'a>,
    ) -> BoxFuture<'a, Result<ExecOutcome, ExecError>>;
    /// [`Executor::execute_and_complete`].
    fn execute_and_complete<'a>(
        &'a self,
        permit: ExecPermit<'a>,
        completion: &'a AppliedCompletion,
    ) -> BoxFuture<'a, Result<Completed, ExecError>>;
    /// [`Executor::kind`].
    fn kind(&self, tool: &str) -> ExecutorKind;
    /// [`Executor::reconcile`].
    fn reconcile<'a>(
        &'a self,
        claim: &'a ClaimRecord,
    ) -> BoxFuture<'a, Result<ReconcileOutcome, ExecError>>;
    /// [`Executor::answered`].
    fn answered(
        &self,
        tool: &str,
        receipt: toolgate::claim::JsonText,
    ) -> Result<toolgate::claim::JsonText, ExecError>;
}

impl<T: Executor> DynExecutor for T {
    fn execute<'a>(
        &'a self,
        permit: ExecPermit<'a>,
    ) -> BoxFuture<'a, Result<ExecOutcome, ExecError>> {
        Box::pin(Executor::execute(self, permit))
    }
    fn execute_and_complete<'a>(
        &'a self,
        permit: ExecPermit<'a>,
        completion: &'a AppliedCompletion,
    ) -> BoxFuture<'a, Result<Completed, ExecError>> {
        Box::pin(Executor::execute_and_complete(self, permit, completion))
    }
    fn kind(&self, tool: &str) -> ExecutorKind {
        Executor::kind(self, tool)
    }
    fn reconcile<'a>(
        &'a self,
        claim: &'a ClaimRecord,
    ) -> BoxFuture<'a, Result<ReconcileOutcome, ExecError>> {
        Box::pin(Executor::reconcile(self, claim))
    }
    fn answered(
        &self,
        tool: &str,
        receipt: toolgate::claim::JsonText,
    ) -> Result<toolgate::claim::JsonText, ExecError> {
        Executor::answered(self, tool, receipt)
    }
}

/// The in-process executor, as the service holds it; [`Exec::as_ref`]
/// lends it as the core's [`Executor`].
#[derive(Clone)]
pub struct Exec(Arc<dyn DynExecutor>);

impl Exec {
    /// Boxes `executor`.
    pub fn new(executor: impl Executor + 'static) -> Self {
        Self(Arc::new(executor))
    }

    /// An executor the caller keeps a typed handle to as well.
    pub fn shared<T: Executor + 'static>(executor: Arc<T>) -> Self {
        Self(executor)
    }

    /// The executor, borrowed as the core's [`Executor`].
    pub fn as_ref(&self) -> ExecRef<'_> {
        ExecRef(&*self.0)
    }
}

/// A borrowed executor trait object, usable where the core wants an
/// [`Executor`]: the one a decision runs with ([`Components::decide`]).
#[derive(Clone, Copy)]
pub struct ExecRef<'e>(pub &'e dyn DynExecutor);

impl Executor for ExecRef<'_> {
    async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        self.0.execute(permit).await
    }
    async fn execute_and_complete(
        &self,
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> Result<Completed, ExecError> {
        self.0.execute_and_complete(permit, completion).await
    }
    fn kind(&self, tool: &str) -> ExecutorKind {
        self.0.kind(tool)
    }
    async fn reconcile(&self, claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        self.0.reconcile(claim).await
    }
    fn answered(
        &self,
        tool: &str,
        receipt: toolgate::claim::JsonText,
    ) -> Result<toolgate::claim::JsonText, ExecError> {
        self.0.answered(tool, receipt)
    }
}

/// [`ClaimStore`], [`ReviewStore`] and [`IdempotencyStore`], boxed: the
/// claim database, which holds the review queue and the `Idempotency-Key`
/// memory too (so a claim can use an approval in its own transaction).
pub trait DynStore: Send + Sync {
    /// [`ClaimStore::claim`].
    fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, Result<RawClaim, StoreError>>;
    /// [`ClaimStore::complete`].
    fn complete(&self, request: CompleteRequest) -> BoxFuture<'_, Result<Completion, StoreError>>;
    /// [`ClaimStore::fetch`].
    fn fetch<'a>(
        &'a self,
        key: &'a OperationKey,
    ) -> BoxFuture<'a, Result<Option<ClaimRecord>, StoreError>>;
    /// [`ClaimStore::list_stuck`].
    fn list_stuck(
        &self,
        now: UnixMillis,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<StuckEntry>, StoreError>>;
    /// [`ClaimStore::record_reconciliation`].
    fn record_reconciliation<'a>(
        &'a self,
        request: ReconcileRequest<'a>,
    ) -> BoxFuture<'a, Result<Reconciled, StoreError>>;
    /// [`ClaimStore::append_audit`].
    fn append_audit<'a>(&'a self, entry: &'a AuditEntry) -> BoxFuture<'a, Result<(), StoreError>>;
    /// [`ClaimStore::audit_trail`].
    fn audit_trail<'a>(
        &'a self,
        key: &'a OperationKey,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<AuditEntry>, StoreError>>;
    /// [`ClaimStore::budget_reserved`].
    fn budget_reserved(&self) -> BoxFuture<'_, Result<Vec<(String, i64)>, StoreError>>;
    /// [`ClaimStore::ready`].
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// [`ReviewStore::open_session`].
    fn open_session(
        &self,
        digest: [u8; 32],
        session: ReviewSession,
        now: UnixMillis,
    ) -> BoxFuture<'_, Result<(), StoreError>>;
    /// [`ReviewStore::session`].
    fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> BoxFuture<'_, Result<Option<ReviewSession>, StoreError>>;
    /// [`ReviewStore::close_session`].
    fn close_session(&self, digest: [u8; 32]) -> BoxFuture<'_, Result<(), StoreError>>;
    /// [`ReviewStore::open_item`].
    fn open_item<'a>(
        &'a self,
        item: NewItem,
        limits: &'a QueueLimits,
    ) -> BoxFuture<'a, Result<Opened, StoreError>>;
    /// [`ReviewStore::request_approval`].
    fn request_approval<'a>(
        &'a self,
        item: NewItem,
        now: UnixMillis,
        limits: &'a QueueLimits,
    ) -> BoxFuture<'a, Result<Requested, StoreError>>;
    /// [`ReviewStore::item`].
    fn item(
        &self,
        id: i64,
        now: UnixMillis,
    ) -> BoxFuture<'_, Result<Option<ReviewItem>, StoreError>>;
    /// [`ReviewStore::list_items`].
    fn list_items<'a>(
        &'a self,
        query: &'a ListQuery,
        now: UnixMillis,
    ) -> BoxFuture<'a, Result<Vec<ReviewItem>, StoreError>>;
    /// [`ReviewStore::open_items`].
    fn open_items(&self, now: UnixMillis) -> BoxFuture<'_, Result<u64, StoreError>>;
    /// [`ReviewStore::vote`].
    fn vote<'a>(
        &'a self,
        vote: ReviewerAct<'a, Verdict>,
    ) -> BoxFuture<'a, Result<Voted, StoreError>>;
    /// [`ReviewStore::close`].
    fn close<'a>(
        &'a self,
        closing: ReviewerAct<'a, Closing>,
    ) -> BoxFuture<'a, Result<Closed, StoreError>>;

    /// [`IdempotencyStore::idem_begin`].
    fn idem_begin<'a>(&'a self, begin: IdemBegin<'a>) -> BoxFuture<'a, Result<Begun, StoreError>>;
    /// [`IdempotencyStore::idem_finish`].
    fn idem_finish<'a>(&'a self, finish: IdemFinish<'a>) -> BoxFuture<'a, Result<(), StoreError>>;
    /// [`IdempotencyStore::idem_forget`].
    fn idem_forget<'a>(&'a self, run: IdemRun<'a>) -> BoxFuture<'a, Result<(), StoreError>>;
    /// [`IdempotencyStore::idem_purge`].
    fn idem_purge(&self, now: UnixMillis, bounds: Bounds) -> BoxFuture<'_, Result<(), StoreError>>;
}

impl<T: ClaimStore + ReviewStore + IdempotencyStore> DynStore for T {
    fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, Result<RawClaim, StoreError>> {
        Box::pin(ClaimStore::claim(self, request))
    }
    fn complete(&self, request: CompleteRequest) -> BoxFuture<'_, Result<Completion, StoreError>> {
        Box::pin(ClaimStore::complete(self, request))
    }
    fn fetch<'a>(
        &'a self,
        key: &'a OperationKey,
    ) -> BoxFuture<'a, Result<Option<ClaimRecord>, StoreError>> {
        Box::pin(ClaimStore::fetch(self, key))
    }
    fn list_stuck(
        &self,
        now: UnixMillis,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<StuckEntry>, StoreError>> {
        Box::pin(ClaimStore::list_stuck(self, now, limit))
    }
    fn record_reconciliation<'a>(
        &'a self,
        request: ReconcileRequest<'a>,
    ) -> BoxFuture<'a, Result<Reconciled, StoreError>> {
        Box::pin(ClaimStore::record_reconciliation(self, request))
    }
    fn append_audit<'a>(&'a self, entry: &'a AuditEntry) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(ClaimStore::append_audit(self, entry))
    }
    fn audit_trail<'a>(
        &'a self,
        key: &'a OperationKey,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<AuditEntry>, StoreError>> {
        Box::pin(ClaimStore::audit_trail(self, key, limit))
    }
    fn budget_reserved(&self) -> BoxFuture<'_, Result<Vec<(String, i64)>, StoreError>> {
        Box::pin(ClaimStore::budget_reserved(self))
    }
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(ClaimStore::ready(self))
    }

    fn open_session(
        &self,
        digest: [u8; 32],
        session: ReviewSession,
        now: UnixMillis,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(ReviewStore::open_session(self, digest, session, now))
    }
    fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> BoxFuture<'_, Result<Option<ReviewSession>, StoreError>> {
        Box::pin(ReviewStore::session(self, digest, now))
    }
    fn close_session(&self, digest: [u8; 32]) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(ReviewStore::close_session(self, digest))
    }
    fn open_item<'a>(
        &'a self,
        item: NewItem,
        limits: &'a QueueLimits,
    ) -> BoxFuture<'a, Result<Opened, StoreError>> {
        Box::pin(ReviewStore::open_item(self, item, limits))
    }
    fn request_approval<'a>(
        &'a self,
        item: NewItem,
        now: UnixMillis,
        limits: &'a QueueLimits,
    ) -> BoxFuture<'a, Result<Requested, StoreError>> {
        Box::pin(ReviewStore::request_approval(self, item, now, limits))
    }
    fn item(
        &self,
        id: i64,
        now: UnixMillis,
    ) -> BoxFuture<'_, Result<Option<ReviewItem>, StoreError>> {
        Box::pin(ReviewStore::item(self, id, now))
    }
    fn list_items<'a>(
        &'a self,
        query: &'a ListQuery,
        now: UnixMillis,
    ) -> BoxFuture<'a, Result<Vec<ReviewItem>, StoreError>> {
        Box::pin(ReviewStore::list_items(self, query, now))
    }
    fn open_items(&self, now: UnixMillis) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(ReviewStore::open_items(self, now))
    }
    fn vote<'a>(
        &'a self,
        vote: ReviewerAct<'a, Verdict>,
    ) -> BoxFuture<'a, Result<Voted, StoreError>> {
        Box::pin(ReviewStore::vote(self, vote))
    }
    fn close<'a>(
        &'a self,
        closing: ReviewerAct<'a, Closing>,
    ) -> BoxFuture<'a, Result<Closed, StoreError>> {
        Box::pin(ReviewStore::close(self, closing))
    }

    fn idem_begin<'a>(&'a self, begin: IdemBegin<'a>) -> BoxFuture<'a, Result<Begun, StoreError>> {
        Box::pin(IdempotencyStore::idem_begin(self, begin))
    }
    fn idem_finish<'a>(&'a self, finish: IdemFinish<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(IdempotencyStore::idem_finish(self, finish))
    }
    fn idem_forget<'a>(&'a self, run: IdemRun<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(IdempotencyStore::idem_forget(self, run))
    }
    fn idem_purge(&self, now: UnixMillis, bounds: Bounds) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(IdempotencyStore::idem_purge(self, now, bounds))
    }
}

/// The claim database, as the service holds it: claims, results, audit,
/// review items and the `Idempotency-Key` memory.
#[derive(Clone)]
pub struct Store(Arc<dyn DynStore>);

impl Store {
    /// Boxes `store`.
    pub fn new(store: impl ClaimStore + ReviewStore + IdempotencyStore + 'static) -> Self {
        Self(Arc::new(store))
    }

    /// A store the caller keeps a typed handle to as well.
    pub fn shared<T: ClaimStore + ReviewStore + IdempotencyStore + 'static>(store: Arc<T>) -> Self {
        Self(store)
    }
}

impl ClaimStore for Store {
    async fn claim(&self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        self.0.claim(request).await
    }
    async fn complete(&self, request: CompleteRequest) -> Result<Completion, StoreError> {
        self.0.complete(request).await
    }
    async fn fetch(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        self.0.fetch(key).await
    }
    async fn list_stuck(&self, now: UnixMillis, limit: u32) -> Result<Vec<StuckEntry>, StoreError> {
        self.0.list_stuck(now, limit).await
    }
    async fn record_reconciliation(
        &self,
        request: ReconcileRequest<'_>,
    ) -> Result<Reconciled, StoreError> {
        self.0.record_reconciliation(request).await
    }
    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.0.append_audit(entry).await
    }
    async fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.0.audit_trail(key, limit).await
    }
    async fn budget_reserved(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.0.budget_reserved().await
    }
    async fn ready(&self) -> Result<(), StoreError> {
        self.0.ready().await
    }
}

impl ReviewStore for Store {
    async fn open_session(
        &self,
        digest: [u8; 32],
        session: ReviewSession,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        self.0.open_session(digest, session, now).await
    }
    async fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> Result<Option<ReviewSession>, StoreError> {
        self.0.session(digest, now).await
    }
    async fn close_session(&self, digest: [u8; 32]) -> Result<(), StoreError> {
        self.0.close_session(digest).await
    }
    async fn open_item(&self, item: NewItem, limits: &QueueLimits) -> Result<Opened, StoreError> {
        self.0.open_item(item, limits).await
    }
    async fn request_approval(
        &self,
        item: NewItem,
        now: UnixMillis,
        limits: &QueueLimits,
    ) -> Result<Requested, StoreError> {
        self.0.request_approval(item, now, limits).await
    }
    async fn item(&self, id: i64, now: UnixMillis) -> Result<Option<ReviewItem>, StoreError> {
        self.0.item(id, now).await
    }
    async fn list_items(
        &self,
        query: &ListQuery,
        now: UnixMillis,
    ) -> Result<Vec<ReviewItem>, StoreError> {
        self.0.list_items(query, now).await
    }
    async fn open_items(&self, now: UnixMillis) -> Result<u64, StoreError> {
        self.0.open_items(now).await
    }
    async fn vote(&self, vote: ReviewerAct<'_, Verdict>) -> Result<Voted, StoreError> {
        self.0.vote(vote).await
    }
    async fn close(&self, closing: ReviewerAct<'_, Closing>) -> Result<Closed, StoreError> {
        self.0.close(closing).await
    }
}

impl IdempotencyStore for Store {
    async fn idem_begin(&self, begin: IdemBegin<'_>) -> Result<Begun, StoreError> {
        self.0.idem_begin(begin).await
    }
    async fn idem_finish(&self, finish: IdemFinish<'_>) -> Result<(), StoreError> {
        self.0.idem_finish(finish).await
    }
    async fn idem_forget(&self, run: IdemRun<'_>) -> Result<(), StoreError> {
        self.0.idem_forget(run).await
    }
    async fn idem_purge(&self, now: UnixMillis, bounds: Bounds) -> Result<(), StoreError> {
        self.0.idem_purge(now, bounds).await
    }
}

/// What a deployment hands the service: its four parts, and how one
/// proposal is decided over them. The defaults decide with the core's
/// [`decide`] over a [`Gate`] of the four parts. An application overrides
/// [`Components::decide`] to read once per decision (sources made for that
/// decision and dropped with it), or [`Components::decide_in_process`] to
/// make its executor for one decision (say, one that writes on the
/// connection the decision claimed on), keeping its concrete types inside.
pub trait Components: Send + Sync + 'static {
    /// Live authorisation (also asked which request entities a tool reads).
    fn authorizer(&self) -> &Authz;
    /// Current resource versions.
    fn state(&self) -> &State;
    /// The claim database.
    fn store(&self) -> &Store;
    /// The in-process executor (also asked during reconciliation).
    fn executor(&self) -> &Exec;

    /// Decides one proposal with `executor` (the in-process one behind the
    /// result cap, or client mode's stand-in).
    fn decide<'a>(
        &'a self,
        policy: &'a Policy,
        executor: ExecRef<'a>,
        proposal: Checked,
        request: &'a Request<'a>,
    ) -> BoxFuture<'a, Result<Decision, GateError>> {
        Box::pin(async move {
            let gate = Gate {
                policy,
                authorizer: self.authorizer(),
                state: self.state(),
                claims: self.store(),
                executor: &executor,
            };
            decide(&gate, proposal, request).await
        })
    }

    /// Decides one proposal with the in-process executor behind `cap`.
    fn decide_in_process<'a>(
        &'a self,
        policy: &'a Policy,
        cap: ResultCap,
        proposal: Checked,
        request: &'a Request<'a>,
    ) -> BoxFuture<'a, Result<Decision, GateError>> {
        Box::pin(async move {
            let executor = self.executor().as_ref();
            let capped = cap.wrap(&executor);
            self.decide(policy, ExecRef(&capped), proposal, request)
                .await
        })
    }
}

/// The four parts as plain fields: the components of a deployment that
/// decides with the core's defaults.
#[derive(Clone)]
pub struct Parts {
    /// Live authorisation.
    pub authorizer: Authz,
    /// Current resource versions.
    pub state: State,
    /// The claim database.
    pub store: Store,
    /// The in-process executor.
    pub executor: Exec,
}

impl Parts {
    /// Boxes each of the four.
    pub fn new(
        authorizer: impl Authorizer + 'static,
        state: impl StateSource + 'static,
        store: impl ClaimStore + ReviewStore + IdempotencyStore + 'static,
        executor: impl Executor + 'static,
    ) -> Self {
        Self {
            authorizer: Authz::new(authorizer),
            state: State::new(state),
            store: Store::new(store),
            executor: Exec::new(executor),
        }
    }
}

impl Components for Parts {
    fn authorizer(&self) -> &Authz {
        &self.authorizer
    }
    fn state(&self) -> &State {
        &self.state
    }
    fn store(&self) -> &Store {
        &self.store
    }
    fn executor(&self) -> &Exec {
        &self.executor
    }
}
