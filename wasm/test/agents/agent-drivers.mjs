// Agents driven by their SDK's own test model (no network): the AI SDK's
// MockLanguageModelV4 and OpenAI Agents JS's ScriptedModel. The model calls the given
// tool once per turn with `input` (`turns` times, each after it saw the previous
// result, as a model that re-plans after an error does), then says "done".
// `beforeTurn(i)` is awaited before turn i's model answer.
import { generateText, isStepCount } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { Agent, run, setTracingDisabled } from "@openai/agents";
import { ScriptedModel, assistantMessage, functionCall, modelResponder } from "@openai/agents/testing";

// Nothing of a test run is exported anywhere.
setTracingDisabled(true);

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/**
 * Runs an AI SDK agent with `tools`; resolves to `{ results, prompts }`: per turn the
 * tool's result (`{ output }` or `{ error }`), and what the model was sent each turn.
 */
export async function runAiSdk({ tools, toolName, input, turns, beforeTurn = async () => {} }) {
  const model = new MockLanguageModelV4({
    doGenerate: async (options) => {
      const turn = model.doGenerateCalls.length - 1;
      await beforeTurn(turn);
      if (turn < turns) {
        return {
          content: [{ type: "tool-call", toolCallId: `call_${turn}`, toolName, input: JSON.stringify(input) }],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        };
      }
      return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
    },
  });
  const result = await generateText({ model, tools, prompt: "Book the slot.", stopWhen: isStepCount(turns + 1) });
  const results = result.steps.flatMap((step) =>
    step.content.flatMap((part) => {
      if (part.type === "tool-result") return [{ output: part.output }];
      if (part.type === "tool-error") return [{ error: String(part.error?.message ?? part.error) }];
      return [];
    }),
  );
  return { results, prompts: model.doGenerateCalls.map((c) => c.prompt), text: result.text };
}

/**
 * Runs an OpenAI Agents JS agent with `tools`; resolves to `{ results, inputs }`: per
 * turn the tool's output as the model got it, and what the model was sent each turn.
 * `context`: the run's context object (what a tool's `runContext.context` holds).
 */
export async function runOpenAIAgents({ tools, toolName, input, turns, beforeTurn = async () => {}, context }) {
  const steps = [];
  for (let turn = 0; turn < turns; turn++) {
    steps.push(
      modelResponder(async () => {
        await beforeTurn(turn);
        return [functionCall(toolName, input, { callId: `call_${turn}` })];
      }),
    );
  }
  steps.push(
    modelResponder(async () => {
      await beforeTurn(turns);
      return [assistantMessage("done")];
    }),
  );
  const model = new ScriptedModel(steps);
  const agent = new Agent({ name: "booker", instructions: "Book the slot.", model, tools });
  const result = await run(agent, "Book the slot.", { maxTurns: turns + 2, context });
  const results = result.newItems.filter((item) => item.type === "tool_call_output_item").map((item) => ({ output: item.output }));
  return { results, inputs: model.calls.map((c) => c.request.input), text: result.finalOutput };
}
