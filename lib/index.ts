// index.ts: the public API of maporl.
export { MaporlError, type MaporlErrorCode } from "./errors.js";
export {
    backend,
    setMatmulPrecision,
    setSimd,
    setThreads,
    type BackendInfo,
    type DeviceInfo,
    type Device,
    type MatmulPrecision,
    type SimdLevel,
} from "./backend.js";
export { outputPoolStats, setOutputPool, type OutputPoolStats } from "./alloc.js";
export { gae, gaeAsync, type GaeBatch, type GaeOptions, type GaeAsyncOptions, type GaeResult } from "./rl/gae.js";
export {
    groupAdvantages,
    groupAdvantagesAsync,
    groupEstimators,
    type GroupBatch,
    type GroupAdvantageOptions,
    type GroupAdvantageAsyncOptions,
    type GroupConvention,
    type GroupEstimator,
    type GroupKernelParams,
    type MagrpoBaseline,
    type MultiObjectiveAggregation,
    type ScaleRewards,
} from "./rl/groupAdvantages.js";
export { createRegistry, type Registry } from "./rl/registry.js";
export {
    reinforceReturns,
    reinforceReturnsAsync,
    type ReturnsBatch,
    type ReturnsOptions,
    type ReturnsResult,
} from "./rl/reinforceReturns.js";
export {
    influenceRewards,
    influenceRewardsAsync,
    collaborationBonus,
    collaborationBonusAsync,
    type InfluenceOptions,
    type InfluenceRule,
    type InfluenceScope,
    type BonusCoefficients,
    type BonusOptions,
} from "./rl/influence.js";
export { tdAdvantages, tdAdvantagesAsync, type TdBatch, type TdOptions, type TdResult } from "./rl/td.js";
export { treeReturns, treeReturnsAsync, type TreeBatch, type TreeOptions, type TreeResult } from "./rl/tree.js";
export {
    policyLoss,
    policyLossAsync,
    valueLoss,
    valueLossAsync,
    type PolicyLossBatch,
    type PolicyLossOptions,
    type PolicyLossResult,
    type PolicyLossStats,
    type PolicyLossType,
    type KlEstimator,
    type LossAggregation,
    type LossOptions,
    type ValueLossBatch,
    type ValueLossOptions,
    type ValueLossResult,
} from "./rl/policyLoss.js";
export { agentGroupAdvantages, agentGroupIds, type AgentGrouping, type AgentStep } from "./rl/agentGroups.js";
export { overlongPenalty, groupHasSignal, type OverlongOptions } from "./rl/dapo.js";
export {
    rolloutCorrection,
    rolloutCorrectionAsync,
    correctionEnabled,
    ROLLOUT_PRESETS,
    type RolloutCorrectionBatch,
    type RolloutCorrectionOptions,
    type RolloutCorrectionPreset,
    type RolloutCorrectionResult,
    type RolloutCorrectionStats,
    type RolloutIsLevel,
    type RolloutIsMode,
    type RolloutRsOption,
} from "./rl/rolloutCorrection.js";
export {
    logprobs,
    logprobsAsync,
    fusedPolicyLoss,
    fusedPolicyLossAsync,
    type LogprobsBatch,
    type LogprobsOptions,
    type LogprobsResult,
    type FusedBatch,
    type FusedOptions,
    type FusedResult,
    type LogitsShape,
    type LogitsDtype,
} from "./rl/logits.js";
export {
    sample,
    sampleAsync,
    logprobsOfTokens,
    logprobsOfTokensAsync,
    type SampleBatch,
    type SampleOptions,
    type SampleResult,
    type TokensBatch,
    type LogprobsOfTokensResult,
    type FilterOrder,
} from "./rl/sampling.js";
export {
    extractFinalNumber,
    extractLabel,
    lastBoxed,
    parseNumber,
    sameNumber,
    type ExtractedNumber,
} from "./rewards/extract.js";
export {
    gsm8kVerifier,
    labelVerifier,
    exactVerifier,
    regexVerifier,
    fnVerifier,
    HttpVerifier,
    scoreAll,
    type Verifier,
    type VerifyItem,
    type Verdict,
    type HttpVerifierOptions,
    type ScoreOutcome,
} from "./rewards/verifiers.js";
export { readGsm8k, readAnli, type Gsm8kRecord, type AnliRecord } from "./debate/datasets.js";
export {
    debateMetrics,
    majorityCredit,
    answerKey,
    type DebateMetrics,
    type EpisodeRecord,
    type AnswerRecord,
    type Transitions,
} from "./debate/metrics.js";
export {
    type Policy,
    type SettledGeneration,
    type ChatMessage,
    type GenerateRequest,
    type Generation,
    type SamplingOptions,
    type TokenCallback,
} from "./policy/types.js";
export { OpenAICompatiblePolicy, type OpenAICompatibleOptions } from "./remote/openai.js";
export { type Dialect } from "./remote/openaiDialect.js";
export { FleetPolicy, type FleetOptions, type AdapterVersion } from "./remote/fleet.js";
export { type EndpointStats } from "./remote/fleetEndpoint.js";
export {
    exportBatch,
    readBatch,
    type ExportOptions,
    type BatchInfo,
    type BatchRow,
    type ManifestRow,
    type PerAnswer,
} from "./export/batch.js";
export { generateSettled, type EpisodeErrorPolicy } from "./policy/settle.js";
export {
    Debate,
    DebateError,
    topologyMatrix,
    type DebateOptions,
    type DebateItem,
    type Topology,
} from "./debate/debate.js";
export {
    defaultPrompts,
    feedbackBin,
    type DebatePrompts,
    type DebateTask,
    type FollowUpContext,
    type QuestionContext,
    type PeerAnswer,
} from "./debate/prompts.js";
export {
    transcriptToJSON,
    transcriptFromJSON,
    transcriptScores,
    type Transcript,
    type TurnEntry,
} from "./debate/transcript.js";
export { JsonlTracer, otelTracer, teeTracer, type Span, type Tracer } from "./debate/trace.js";
export {
    JointRollout,
    JointRolloutError,
    type JointRolloutOptions,
    type JointTree,
    type JointAction,
    type TransitionInput,
} from "./debate/jointRollout.js";
export { NativePolicy, type LoadOptions } from "./model/nativePolicy.js";
export type { GenerateOptions } from "./model/generate.js";
export type { NativePolicyConfig, SaveOptions, TrainBatch, TrainOptions, TrainResult } from "./model/options.js";
export type { ModelShape } from "./model/core.js";
export { HfTokenizer, IdsOnlyTokenizer, type HfTokenizerOptions } from "./model/hfTokenizer.js";
export { DEFAULT_TEMPLATE_LIMITS, renderTemplate, TemplateError, type TemplateLimits } from "./model/template.js";
export { HF_MODEL_TYPES, type HfModelType } from "./model/hf.js";
export { LORA_TARGETS, type LoraOptions, type LoraTarget } from "./model/lora.js";
export { CharTokenizer, SPECIAL_TOKENS, type TokenizerJSON, type PolicyTokenizer } from "./policy/tokenizer.js";
export { readSafetensors, writeSafetensors, type TensorEntry } from "./model/safetensors.js";
export { splitSumTask, arithDebateTask, type Task, type TaskItem, type ToolPrevious } from "./train/tasks/tasks.js";
export { lookupTask } from "./train/tasks/lookup.js";
export { gsm8kTask } from "./train/tasks/gsm8k.js";
export {
    toyGame,
    observation1,
    observation2,
    toyPayoffGrid,
    type ToyOptions,
    type ToyPayoffs,
    type ToyResult,
} from "./train/tasks/toy.js";
export { servePolicy, type ServeOptions, type RunningServer } from "./serve/server.js";
export { startGateway, type Gateway, type GatewayOptions } from "./gateway/gateway.js";
export type {
    EpisodeLimits,
    EpisodeReward,
    EpisodeStatus,
    EpisodeStore,
    GatewayCall,
    GatewayEpisode,
    GatewaySample,
    Milestone,
    RecordedToolCall,
} from "./gateway/episodes.js";
export {
    trainGatewayIteration,
    type GatewayIterationResult,
    type GatewayRun,
    type GatewayTrainOptions,
} from "./gateway/train.js";
export { commandProgram, type CommandProgramOptions } from "./gateway/command.js";
export {
    criticCredit,
    influenceCredit,
    magrpoCredit,
    type CallCredit,
    type CriticCreditOptions,
    type InfluenceCreditOptions,
} from "./gateway/credit.js";
export {
    evaluateGateway,
    trainGateway,
    type GatewayEvalOptions,
    type GatewayEvalResult,
    type GatewayLoopOptions,
    type GatewayLoopResult,
} from "./gateway/loop.js";
export { trainJob } from "./train/job/job.js";
export { formatSummary } from "./train/job/summary.js";
export type { JobProgress, TrainJobOptions, TrainSummary } from "./train/job/types.js";
export { type StageTiming } from "./train/job/clock.js";
export { resolveConfig, DEFAULT_CONFIG, type TrainConfig, type Algo, type Schedule } from "./train/job/config.js";
export type { CorrectionConfig, MismatchStats } from "./train/trainers/correction.js";
export type { AgentSettings } from "./train/job/agentSettings.js";
export { evaluateTeam, type EvalResult } from "./train/job/evaluate.js";
export { compactDebate } from "./train/tasks/compactDebate.js";
export {
    rolloutTeam,
    turnPrompt,
    type RolloutOptions,
    type TeamRollout,
    type RolloutEntry,
} from "./train/trainers/rollout.js";
export {
    Workflow,
    type WorkflowSpec,
    type WorkflowRole,
    type WorkflowTurn,
    type WorkflowState,
    type WorkflowEpisode,
} from "./env/workflow.js";
export { SharedArtifact, type ArtifactVersion } from "./env/artifact.js";
export { trainWorkflow, type WorkflowTrainOptions, type WorkflowTrainResult } from "./env/workflowTrain.js";
export { runToolCall, toolSpec, callKey, type Tool, type ToolContext, type ToolResult } from "./env/tools.js";
export { LoopDetector, type LoopEvent, type LoopOptions } from "./env/loops.js";
export {
    codeReviewSpec,
    codeReviewWorkflow,
    runCodeTests,
    runTestsTool,
    networkIsolationAvailable,
    type CodeTask,
    type CodeReviewOptions,
    type TestRun,
} from "./env/codeReview.js";
export type { ToolCall, ToolSpec } from "./policy/types.js";
