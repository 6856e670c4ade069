"""Attribute names rag-monitor emits and reads.

OpenInference names first (Phoenix renders them natively), OTel GenAI names where they
exist (other backends read those), and ``rag.*`` only for what neither defines. No
imports: every layer of the project, the SDK included, may depend on this module.

Indexed lists are flattened the OpenInference way: ``retrieval.documents.{i}.document.id``.
Use the ``*_prefix`` helpers below to build or parse them.
"""

# --- OpenInference: span kind -------------------------------------------------------

OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
"""The OpenInference span kind: one of the ``SPAN_KIND_*`` values."""

SPAN_KIND_CHAIN = "CHAIN"
SPAN_KIND_RETRIEVER = "RETRIEVER"
SPAN_KIND_RERANKER = "RERANKER"
SPAN_KIND_LLM = "LLM"
SPAN_KIND_EMBEDDING = "EMBEDDING"
SPAN_KIND_TOOL = "TOOL"
SPAN_KIND_AGENT = "AGENT"
SPAN_KIND_GUARDRAIL = "GUARDRAIL"
SPAN_KIND_EVALUATOR = "EVALUATOR"
SPAN_KINDS = frozenset(
    {
        SPAN_KIND_CHAIN,
        SPAN_KIND_RETRIEVER,
        SPAN_KIND_RERANKER,
        SPAN_KIND_LLM,
        SPAN_KIND_EMBEDDING,
        SPAN_KIND_TOOL,
        SPAN_KIND_AGENT,
        SPAN_KIND_GUARDRAIL,
        SPAN_KIND_EVALUATOR,
    }
)

# --- OpenInference: input, output, session, metadata -----------------------------------

INPUT_VALUE = "input.value"
"""The query on a root span, a stage's input elsewhere."""
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
"""The answer on a root span, a stage's output elsewhere."""
OUTPUT_MIME_TYPE = "output.mime_type"
SESSION_ID = "session.id"
USER_ID = "user.id"
METADATA = "metadata"
"""A JSON object as a string (OpenInference sends it this way on the wire)."""
TAG_TAGS = "tag.tags"

# --- OpenInference: retrieval and reranking --------------------------------------------

RETRIEVAL_DOCUMENTS = "retrieval.documents"
RERANKER_INPUT_DOCUMENTS = "reranker.input_documents"
RERANKER_OUTPUT_DOCUMENTS = "reranker.output_documents"
RERANKER_MODEL_NAME = "reranker.model_name"
RERANKER_TOP_K = "reranker.top_k"
RERANKER_QUERY = "reranker.query"

DOCUMENT_ID = "document.id"
DOCUMENT_CONTENT = "document.content"
DOCUMENT_SCORE = "document.score"
DOCUMENT_METADATA = "document.metadata"
"""JSON object as a string."""

# --- OpenInference: embeddings -----------------------------------------------------------

EMBEDDING_MODEL_NAME = "embedding.model_name"
EMBEDDING_EMBEDDINGS = "embedding.embeddings"
EMBEDDING_TEXT = "embedding.text"
EMBEDDING_VECTOR = "embedding.vector"

# --- OpenInference: LLM ------------------------------------------------------------------

LLM_MODEL_NAME = "llm.model_name"
LLM_PROVIDER = "llm.provider"
LLM_TOKEN_COUNT_PROMPT = "llm.token_count.prompt"
LLM_TOKEN_COUNT_COMPLETION = "llm.token_count.completion"
LLM_TOKEN_COUNT_TOTAL = "llm.token_count.total"
LLM_TOKEN_COUNT_PROMPT_CACHE_READ = "llm.token_count.prompt_details.cache_read"
"""Of the prompt tokens, those read from the provider's prompt cache (priced at the cached rate)."""
LLM_TOKEN_COUNT_PROMPT_CACHE_WRITE = "llm.token_count.prompt_details.cache_write"
"""Of the prompt tokens, those written to the provider's prompt cache (priced at the cache-write rate).
OpenInference's instrumentors count both cache parts in ``llm.token_count.prompt``: OpenAI's
``prompt_tokens`` include ``cached_tokens``; for Anthropic, whose ``input_tokens`` exclude the
cache reads and writes, the instrumentor reports input + cache_creation + cache_read."""
LLM_INPUT_MESSAGES = "llm.input_messages"
LLM_OUTPUT_MESSAGES = "llm.output_messages"
MESSAGE_ROLE = "message.role"
MESSAGE_CONTENT = "message.content"

# --- OTel GenAI semantic conventions -----------------------------------------------------

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
"""``chat``, ``text_completion``, ``embeddings``, ``execute_tool`` ..."""
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
"""Of ``gen_ai.usage.input_tokens``, those served from the provider's cache."""
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
"""Of ``gen_ai.usage.input_tokens`` (which includes every cached part), those written to the provider's cache."""
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_PROMPT = "gen_ai.prompt"
GEN_AI_COMPLETION = "gen_ai.completion"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_RETRIEVAL_QUERY_TEXT = "gen_ai.retrieval.query.text"
GEN_AI_RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"
"""A JSON array of ``{"id", "score", "content"?}`` objects."""
GEN_AI_DATA_SOURCE_ID = "gen_ai.data_source.id"
"""On a retrieval span: the data source (index, collection) searched; prices per-call retrievals."""
DB_SYSTEM_NAME = "db.system.name"
"""OTel database conventions: the vector store a retrieval queried (``qdrant``, ``pinecone``, ...)."""
GEN_AI_OPERATION_CHAT = "chat"
GEN_AI_OPERATION_GENERATE_CONTENT = "generate_content"
GEN_AI_OPERATION_TEXT_COMPLETION = "text_completion"
GEN_AI_OPERATION_EMBEDDINGS = "embeddings"
GEN_AI_OPERATION_RETRIEVAL = "retrieval"

# --- OTel resource -------------------------------------------------------------------------

SERVICE_NAME = "service.name"
OPENINFERENCE_PROJECT_NAME = "openinference.project.name"
"""Resource attribute naming the Phoenix project spans land in."""
SERVICE_VERSION = "service.version"
"""The app's release when ``rag.release`` is absent (OpenInference instrumentations)."""

# --- rag.*: what neither convention defines ------------------------------------------------

RAG_STAGE = "rag.stage"
"""The pipeline stage a span times: one of ``STAGES`` or an app-defined name."""
RAG_RELEASE = "rag.release"
RAG_PROMPT_VERSION = "rag.prompt.version"
"""On the root span: the version of the prompt template the app used (``init(prompt_version=...)``);
a new value is a change the alerts' triage compares (``rag_change_events_total{kind="prompt"}``)."""
RAG_CONFIG_VERSION = "rag.config.version"
"""On the root span: the version of the pipeline's configuration (top-k, filters, model settings);
a new value is a change (``kind="config"``)."""
LLM_INVOCATION_PARAMETERS = "llm.invocation_parameters"
"""OpenInference: the request's parameters as JSON; its ``model`` is the requested model, while
``llm.model_name`` is the model the provider answered with (``gen_ai.request.model`` /
``gen_ai.response.model`` in the GenAI conventions). A new response model under one requested
name is a change (``kind="model"``): a provider's silent model update."""
CHANGE_KINDS = ("release", "model", "prompt", "config", "index")
"""What counts as a change for triage (``rag_change_events_total{kind}``)."""
RAG_VARIANT = "rag.variant"
"""``production``, ``shadow`` or ``candidate``: see ``VARIANTS``."""
RAG_TENANT = "rag.tenant"
RAG_INTENT = "rag.intent"
RAG_ROUTE = "rag.route"
RAG_ANSWER_REFUSED = "rag.answer.refused"
RAG_ANSWER_CONFIDENCE = "rag.answer.confidence"
RAG_ANSWER_REFUSAL_REASON = "rag.answer.refusal_reason"
RAG_CITATIONS = "rag.citations"
"""A string array of the document ids the answer cites."""
RAG_SHADOW_OF = "rag.shadow_of"
"""On a shadow variant's root span: the trace id of the production query it shadows."""
RAG_SHADOW_CANDIDATE = "rag.shadow.candidate"
"""On a shadow variant's root span: the candidate pipeline's name (``q.shadow(name, ...)``)."""
RAG_TIME_TO_FIRST_TOKEN = "rag.generation.time_to_first_token_s"
"""On the generate span: seconds from the query's start to the first token (what the user waits)."""
RAG_STAGE_TIME_TO_FIRST_TOKEN = "rag.generation.stage_time_to_first_token_s"
"""On the generate span: seconds from the generate stage's start to the first token (the model's own wait)."""
RAG_CANCEL_REASON = "rag.query.cancel_reason"
"""On a root span that did not finish: ``client_disconnect``, ``timeout`` or ``cancelled`` (or the app's own word)."""

RAG_FILTER_KIND = "rag.filter.kind"
"""``entitlement`` (never relaxed, never a false exclusion) or ``relevance``."""
RAG_FILTER_PREDICATE = "rag.filter.predicate"
RAG_FILTER_CANDIDATES_IN = "rag.filter.candidates_in"
RAG_FILTER_CANDIDATES_OUT = "rag.filter.candidates_out"
RAG_FILTER_EXCLUDED_IDS = "rag.filter.excluded_ids"
"""A string array: ids the filter removed from the unfiltered top-k, when the app knows them."""
RAG_FILTER_EXCLUDED_DOCUMENTS = "rag.filter.excluded_documents"
"""Documents the filter removed, flattened like ``retrieval.documents``
(``rag.filter.excluded_documents.{i}.document.id|content``): reviewers judge their relevance blind."""

RAG_CONTEXT_DOCUMENT_IDS = "rag.context.document_ids"
"""On the context stage: ids of the documents delivered to the generator, in prompt order."""
RAG_CONTEXT_TOKENS = "rag.context.tokens"

RAG_FEEDBACK_KIND = "rag.feedback.kind"
RAG_FEEDBACK_REASON = "rag.feedback.reason"
RAG_FEEDBACK_VALUE = "rag.feedback.value"
RAG_FEEDBACK_SPAN_NAME = "rag.feedback"
"""The name of the span that carries feedback, parented on the query's root span."""
RAG_QUERY_SPAN_NAME = "rag.query"
"""The name of the SDK's root span."""

RAG_CONTENT_HIDDEN = "rag.content.hidden"
"""On the root span: a string array of the content the app hid at the source (``CaptureConfig``):
``query``, ``answer``, ``documents`` (``HIDDEN_CONTENT``). Hidden values are not sent at all."""
HIDDEN_CONTENT = ("query", "answer", "documents")

RAG_EMBEDDING_ROLE = "rag.embedding.role"
"""On an embedding stage: whose vectors it carries, ``query`` or ``document`` (``EMBEDDING_ROLES``).
Without it, only a vector whose ``embedding.text`` is the query is taken as the query's."""
EMBEDDING_ROLE_QUERY = "query"
EMBEDDING_ROLE_DOCUMENT = "document"
EMBEDDING_ROLES = (EMBEDDING_ROLE_QUERY, EMBEDDING_ROLE_DOCUMENT)

# Index freshness. Neither OpenInference nor the GenAI conventions describe ingestion (LlamaIndex
# and LangChain instrumentations emit EMBEDDING spans while indexing, with no commit time).
RAG_INDEX_SPAN_NAME = "rag.index"
"""The name of the SDK's index-event span (a trace of its own): a document version became searchable."""
RAG_INDEX_DOCUMENT_ID = "rag.index.document_id"
"""Marks an index event: any span carrying it (an app's own ingestion span too) is read as one."""
RAG_INDEX_COMMITTED_AT = "rag.index.committed_at"
"""Unix seconds when this version of the document was committed at its source."""
RAG_INDEX_INDEXED_AT = "rag.index.indexed_at"
"""Unix seconds when it became searchable; absent: the span's end time."""
RAG_INDEX_VERSION = "rag.index.version"
"""On an index event: the index build or load the version arrived in (a rebuild's or bulk load's id).
A new value per source is a change (``kind="index"``); one per build, however many documents it holds."""
RAG_INDEX_SOURCE = "rag.index.source"
"""Where the document comes from (``confluence``, ``s3://policies``): a label, folded to the first N."""
DOCUMENT_COMMITTED_AT_KEY = "committed_at"
"""The ``document.metadata`` key carrying the commit time of the version a retrieval returned
(Unix seconds or ISO 8601); other keys are configurable (``mapping.document_committed_at_metadata_keys``)."""

RAG_CACHE_PREFIX = "rag.cache"
"""On the root span: ``rag.cache.{kind}.hits`` and ``rag.cache.{kind}.misses``, lookups in the app's
caches during the query (``cache_attribute``). The prompt (KV) cache is read from token counts."""
CACHE_EMBEDDING = "embedding"
CACHE_RETRIEVAL = "retrieval"
CACHE_RESPONSE = "response"
CACHE_KINDS = (CACHE_EMBEDDING, CACHE_RETRIEVAL, CACHE_RESPONSE)
CACHE_PROMPT = "prompt"
"""The provider's prompt cache: ``llm.token_count.prompt_details.cache_read`` / ``gen_ai.usage.cache_read.input_tokens``."""

RAG_TRUNCATED = "rag.truncated"
"""A string array of the attribute keys the SDK truncated at the source."""

# --- value sets ------------------------------------------------------------------------------

STAGE_REWRITE = "rewrite"
STAGE_FILTER = "filter"
STAGE_RETRIEVE = "retrieve"
STAGE_RERANK = "rerank"
STAGE_CONTEXT = "context"
STAGE_GENERATE = "generate"
STAGE_EMBED = "embed"
STAGES = (
    STAGE_REWRITE,
    STAGE_EMBED,
    STAGE_FILTER,
    STAGE_RETRIEVE,
    STAGE_RERANK,
    STAGE_CONTEXT,
    STAGE_GENERATE,
)
"""The stages DESIGN.md names, in pipeline order; anything else is reported as ``other``."""

FILTER_ENTITLEMENT = "entitlement"
FILTER_RELEVANCE = "relevance"
FILTER_KINDS = (FILTER_ENTITLEMENT, FILTER_RELEVANCE)

VARIANT_PRODUCTION = "production"
VARIANT_SHADOW = "shadow"
VARIANT_CANDIDATE = "candidate"
VARIANTS = (VARIANT_PRODUCTION, VARIANT_SHADOW, VARIANT_CANDIDATE)

FEEDBACK_THUMBS_UP = "thumbs_up"
FEEDBACK_THUMBS_DOWN = "thumbs_down"
FEEDBACK_REGENERATE = "regenerate"
FEEDBACK_COPY = "copy"
FEEDBACK_DWELL = "dwell"
FEEDBACK_FOLLOW_UP = "follow_up"
FEEDBACK_CITATION_CLICK = "citation_click"
"""The user opened a cited document: its id in OpenInference's ``document.id`` on the feedback span."""
FEEDBACK_SHARE = "share"
"""The user shared or exported the answer (how: ``rag.feedback.value``)."""
FEEDBACK_EDIT = "edit"
"""The user edited the answer: their text in OpenInference's ``output.value`` on the feedback span."""
FEEDBACK_KINDS = (
    FEEDBACK_THUMBS_UP,
    FEEDBACK_THUMBS_DOWN,
    FEEDBACK_REGENERATE,
    FEEDBACK_COPY,
    FEEDBACK_DWELL,
    FEEDBACK_FOLLOW_UP,
    FEEDBACK_CITATION_CLICK,
    FEEDBACK_SHARE,
    FEEDBACK_EDIT,
)


def retrieval_document_prefix(i: int) -> str:
    """``retrieval.documents.{i}.``: prefix of the i-th retrieved document's attributes."""
    return f"{RETRIEVAL_DOCUMENTS}.{i}."


def reranker_input_document_prefix(i: int) -> str:
    return f"{RERANKER_INPUT_DOCUMENTS}.{i}."


def reranker_output_document_prefix(i: int) -> str:
    return f"{RERANKER_OUTPUT_DOCUMENTS}.{i}."


def cache_attribute(kind: str, hit: bool) -> str:
    """``rag.cache.{kind}.hits`` or ``rag.cache.{kind}.misses``."""
    return f"{RAG_CACHE_PREFIX}.{kind}.{'hits' if hit else 'misses'}"


def embedding_prefix(i: int) -> str:
    """``embedding.embeddings.{i}.``: prefix of the i-th embedding (``embedding.vector``, ``embedding.text``)."""
    return f"{EMBEDDING_EMBEDDINGS}.{i}."
