// Unchanged agent programs written with real frameworks, pointed at the gateway by their client settings only: the
// Vercel AI SDK (ai + @ai-sdk/openai-compatible), the OpenAI Agents SDK (@openai/agents, chat completions and its
// default Responses API) and LangGraph.js (@langchain/langgraph with @langchain/openai's ChatOpenAI). Each
// program is a researcher that calls a lookup tool, then a solver that answers from the researcher's note. The tiny
// model is first taught (from prompts the gateway itself recorded of the program) to call the tool and then to answer,
// so that the framework runs a real tool loop on a real model. Checked: the transcript has every agent's calls in
// order, the tool call is recorded with the result the framework's tool returned, and every recorded call's ids and
// log-probs are what the model samples in process for the recorded messages and seed.
import { rmSync } from "node:fs";

import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { tool as lcTool } from "@langchain/core/tools";
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI } from "@langchain/openai";
import {
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIProvider,
    Runner,
    setTracingDisabled,
    tool as agentTool,
} from "@openai/agents";
import { generateText, stepCountIs, streamText, tool } from "ai";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";

import type { NativePolicy } from "../../lib/index.js";
import type { GatewayEpisode } from "../../lib/gateway/episodes.js";
import { type Gateway, startGateway } from "../../lib/gateway/gateway.js";
import { lookupAgents, teach } from "../helpers/gatewayTeam.js";

const TABLE: Record<string, string> = { "3": "v3", "5": "v5" };
const CALL = '<tool_call>{"name": "lookup", "arguments": {"key": "3"}}</tool_call>';
const INSTRUCTIONS = "You research. Look the key up.";
const QUESTION = "Find k=3.";

let work: string, base: NativePolicy, agents: Record<string, NativePolicy>, gw: Gateway;
const looked: string[] = [];

beforeAll(async () => {
    const t = await lookupAgents();
    ({ work, base } = t);
    agents = { researcher: t.researcher, solver: t.solver };
    gw = await startGateway({ agents, port: 0 });
    setTracingDisabled(true); // (the Agents SDK would export traces to OpenAI's servers)
});
afterAll(async () => {
    await gw.close();
    await base.dispose();
    rmSync(work, { recursive: true, force: true });
});

// The AI SDK program: the researcher with a tool (up to 3 steps), then the solver streamed.
async function aiSdkProgram(episode: string): Promise<string> {
    const provider = createOpenAICompatible({ name: "team", baseURL: gw.episodeUrl(episode), apiKey: "unused" });
    const research = await generateText({
        model: provider("researcher"),
        system: INSTRUCTIONS,
        prompt: QUESTION,
        tools: {
            lookup: tool({
                description: "Looks a key up",
                inputSchema: z.object({ key: z.string() }),
                execute: async ({ key }) => {
                    looked.push(key);
                    return TABLE[key] ?? "unknown";
                },
            }),
        },
        stopWhen: stepCountIs(3),
        temperature: 0,
        maxOutputTokens: 100,
    });
    const answer = streamText({
        model: provider("solver"),
        prompt: `${QUESTION} Note: ${research.text}`,
        temperature: 0.7,
        maxOutputTokens: 8,
    });
    return await answer.text;
}

// The Agents SDK program: the same team, the episode named by a header of the client; over chat completions, or
// with the SDK's defaults (the Responses API, models by name).
async function agentsSdkProgram(episode: string, api: "chat" | "responses" = "chat"): Promise<string> {
    const client = new OpenAI({
        baseURL: gw.baseUrl,
        apiKey: "unused",
        defaultHeaders: { "x-maporl-episode": episode },
    });
    // (the Responses API with a provider of this episode's client: the default provider keeps its first client)
    const runner = new Runner(
        api === "responses" ? { modelProvider: new OpenAIProvider({ openAIClient: client }) } : {},
    );
    const model = (name: string) => (api === "chat" ? new OpenAIChatCompletionsModel(client, name) : name);
    const researcher = new Agent({
        name: "researcher",
        instructions: INSTRUCTIONS,
        model: model("researcher"),
        tools: [
            agentTool({
                name: "lookup",
                description: "Looks a key up",
                parameters: z.object({ key: z.string() }),
                execute: async ({ key }) => {
                    looked.push(key);
                    return TABLE[key] ?? "unknown";
                },
            }),
        ],
        modelSettings: { temperature: 0, maxTokens: 100 },
    });
    const solver = new Agent({
        name: "solver",
        instructions: "You answer.",
        model: model("solver"),
        modelSettings: { temperature: api === "chat" ? 0.7 : 0, maxTokens: 8 },
    });
    const note = await runner.run(researcher, QUESTION, { maxTurns: 4 });
    const answer = await runner.run(solver, `${QUESTION} Note: ${String(note.finalOutput)}`, { maxTurns: 1 });
    return String(answer.finalOutput);
}

// The LangGraph program: a graph of two nodes, the researcher (LangGraph's prebuilt ReAct agent with a tool) then the
// solver (a ChatOpenAI call); the agent named by the model, the episode by the base URL.
async function langGraphProgram(episode: string): Promise<string> {
    const chat = (model: string, temperature: number, maxTokens: number) =>
        new ChatOpenAI({
            model,
            temperature,
            maxTokens,
            apiKey: "unused",
            configuration: { baseURL: gw.episodeUrl(episode) },
        });
    const lookup = lcTool(
        async ({ key }: { key: string }) => {
            looked.push(key);
            return TABLE[key] ?? "unknown";
        },
        { name: "lookup", description: "Looks a key up", schema: z.object({ key: z.string() }) },
    );
    const researcher = createReactAgent({ llm: chat("researcher", 0, 100), tools: [lookup], prompt: INSTRUCTIONS });
    const State = Annotation.Root({ note: Annotation<string>(), answer: Annotation<string>() });
    const graph = new StateGraph(State)
        .addNode("research", async () => {
            const r = await researcher.invoke(
                { messages: [{ role: "user", content: QUESTION }] },
                { recursionLimit: 6 },
            );
            return { note: String(r.messages.at(-1)!.content) };
        })
        .addNode("solve", async (st: typeof State.State) => {
            const m = await chat("solver", 0.7, 8).invoke(`${QUESTION} Note: ${st.note}`);
            return { answer: String(m.content) };
        })
        .addEdge(START, "research")
        .addEdge("research", "solve")
        .addEdge("solve", END)
        .compile();
    return (await graph.invoke({})).answer;
}

// Teaches the base, from the researcher's prompts this program sends (recorded by the gateway), to call the tool and
// then to answer with the tool's result.
async function teachFor(program: (ep: string) => Promise<string>, name: string, solverToo = false): Promise<void> {
    // Round k runs the program (an untrained answer may run past its max tokens: a Responses client then throws),
    // and adds the prompt of its call k: the researcher's first (-> the call), its second (-> the answer), the solver's.
    const texts = [CALL, "k=3 is v3.", ...(solverToo ? ["3 is v3"] : [])];
    const pairs: { prompt: number[]; text: string }[] = [];
    for (const [k, text] of texts.entries()) {
        const id = `${name}-teach-${k}`;
        await program(id).catch(() => "");
        pairs.push({ prompt: gw.episodes.get(id)!.calls[k].samples[0].promptTokenIds, text });
        await teach(base, pairs);
        gw.episodes.fail(id, "teaching");
    }
}

// Every recorded call replayed in process (the agent's policy, the recorded messages, tools, sampling and seed).
async function expectReplays(ep: GatewayEpisode): Promise<void> {
    for (const c of ep.calls)
        for (const s of c.samples) {
            expect(s.tokenIdsExact).toBe(true);
            const [g] = await agents[c.agent].generate([
                {
                    messages: c.messages,
                    sampling: c.sampling,
                    seed: BigInt(s.seed),
                    ...(c.tools ? { tools: c.tools } : {}),
                },
            ]);
            expect([s.promptTokenIds, s.tokenIds, s.logprobs]).toEqual([g.promptTokenIds, g.tokenIds, g.logprobs]);
        }
}

function expectTranscript(ep: GatewayEpisode): void {
    expect(ep.calls.map((c) => c.agent)).toEqual(["researcher", "researcher", "solver"]);
    const [call, answer, solve] = ep.calls.map((c) => c.samples[0]);
    expect(call.toolCalls).toEqual([
        { id: expect.any(String) as string, name: "lookup", arguments: '{"key":"3"}', result: "v3" },
    ]);
    expect(ep.calls[1].messages.at(-1)).toMatchObject({
        role: "tool",
        content: "v3",
        toolCallId: call.toolCalls![0].id,
    });
    expect(answer.text).toBe("k=3 is v3.");
    expect(ep.calls[2].messages.at(-1)!.content).toContain("Note: k=3 is v3.");
    expect(solve.tokenIds.length).toBeGreaterThan(0);
    expect(ep.calls.every((c, k) => c.index === k && c.latencyMs > 0)).toBe(true);
}

describe("gateway: unchanged programs of real frameworks", () => {
    it("Vercel AI SDK (generateText with a tool, streamText): the transcript, the tool's result, the exact ids", async () => {
        await teachFor(aiSdkProgram, "ai");
        looked.length = 0;
        const answer = await aiSdkProgram("ai-run");
        expect(looked).toEqual(["3"]);
        const ep = gw.episodes.get("ai-run")!;
        expectTranscript(ep);
        expect(ep.calls[2].samples[0].text).toBe(answer); // the streamed answer, whole
        await expectReplays(ep);
        gw.episodes.reward("ai-run", { reward: 1 });
        expect(gw.episodes.take("ai-run")!.status).toBe("rewarded");
    });

    it("OpenAI Agents SDK (an Agent with a tool, chat completions): the transcript, the tool's result, the exact ids", async () => {
        await teachFor(agentsSdkProgram, "agents");
        looked.length = 0;
        const answer = await agentsSdkProgram("agents-run");
        expect(looked).toEqual(["3"]);
        const ep = gw.episodes.get("agents-run")!;
        expectTranscript(ep);
        expect(ep.calls[2].samples[0].text).toBe(answer);
        expect(ep.calls[0].messages[0]).toEqual({ role: "system", content: INSTRUCTIONS });
        await expectReplays(ep);
    });

    it("OpenAI Agents SDK with its defaults (the Responses API): the transcript, the tool's result, the exact ids", async () => {
        const program = (ep: string) => agentsSdkProgram(ep, "responses");
        await teachFor(program, "responses", true); // (the solver too: an answer cut at max tokens is an error there)
        looked.length = 0;
        const answer = await program("responses-run");
        expect(looked).toEqual(["3"]);
        const ep = gw.episodes.get("responses-run")!;
        expectTranscript(ep);
        expect(ep.calls[2].samples[0].text).toBe(answer);
        await expectReplays(ep);
    });

    it("LangGraph (a StateGraph: a prebuilt ReAct agent with a tool, then ChatOpenAI): the transcript, the exact ids", async () => {
        await teachFor(langGraphProgram, "langgraph");
        looked.length = 0;
        const answer = await langGraphProgram("langgraph-run");
        expect(looked).toEqual(["3"]);
        const ep = gw.episodes.get("langgraph-run")!;
        expectTranscript(ep);
        expect(ep.calls[2].samples[0].text).toBe(answer);
        expect(ep.calls[0].messages[0]).toEqual({ role: "system", content: INSTRUCTIONS });
        await expectReplays(ep);
    });
});
