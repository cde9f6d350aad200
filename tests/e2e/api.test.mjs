// The official openai SDK against tether (in front of tether-mock): every OpenAI surface the
// gateway serves, as a user's code would call it, plus the errors that user would catch.
import assert from 'node:assert/strict';
import {after, before, describe, test} from 'node:test';
import OpenAI from 'openai';

import {start_stack, upstream_requests} from './harness.mjs';

const test_timeout = {
  timeout: 20_000
};

describe('openai SDK through tether', {timeout: 120_000}, () => {
  let stack;
  let client;

  before(async () => {
    stack = await start_stack();
    client =
        new OpenAI({baseURL: stack.base_url, apiKey: 'unused', maxRetries: 0, timeout: 15_000});
  }, {timeout: 20_000});

  after(async () => {
    await stack?.stop();
  }, {timeout: 20_000});

  test(
      'chat completion without stream returns the upstream answer and a request id', test_timeout,
      async () => {
        const {data, response, request_id} =
            await client.chat.completions
                .create({model: 'gpt-test', messages: [{role: 'user', content: 'hello'}]})
                .withResponse();

        assert.equal(response.status, 200);
        assert.equal(data.object, 'chat.completion');
        assert.equal(data.choices.length, 1);
        assert.equal(data.choices[0].message.role, 'assistant');
        assert.equal(typeof data.choices[0].message.content, 'string');
        assert.ok(data.choices[0].message.content.length > 0);
        // The contract rewrites only the request's model; the answer passes through as written.
        assert.equal(data.model, 'mock');
        assert.match(request_id, /^[A-Za-z0-9._-]{1,128}$/);
        assert.equal(data._request_id, request_id);

        const entry = await stack.wait_for_access(request_id);
        assert.equal(entry.model, 'gpt-test');
        assert.equal(entry.stream, false);
        assert.equal(entry.outcome, 'ok');
        assert.equal(entry.status, 200);
        assert.equal(entry.attempts.length, 1);
        assert.equal(entry.attempts[0].model, 'mock');
      });

  test(
      'chat completion with a caller request id echoes it and forwards it upstream', test_timeout,
      async () => {
        const request_id = 'e2e-chat-own-id.1';
        const completion = await client.chat.completions.create(
            {model: 'gpt-test', messages: [{role: 'user', content: 'hello'}]},
            {headers: {'X-Request-Id': request_id}});

        assert.equal(completion._request_id, request_id);
        const upstream = upstream_requests(await stack.mock_stats(), request_id);
        assert.equal(upstream.length, 1);
        assert.equal(upstream[0].model, 'mock');
        assert.equal(upstream[0].path, '/v1/chat/completions');
        // The SDK's key is the caller's credential, never forwarded; this deployment names none.
        assert.equal(upstream[0].headers.authorization, undefined);
        assert.ok(Number(upstream[0].headers['x-request-deadline-ms']) <= 10_000);
      });

  test('chat completion with stream relays every chunk as it arrives', test_timeout, async () => {
    const request = {model: 'short-stream', messages: [{role: 'user', content: 'count'}]};
    const {data: stream, request_id} =
        await client.chat.completions.create({...request, stream: true}).withResponse();
    assert.ok(request_id, 'a stream carries the request id header too');
    const arrivals = [];
    const pieces = [];
    let finish_reason = null;
    for await (const chunk of stream) {
      arrivals.push(performance.now());
      assert.equal(chunk.object, 'chat.completion.chunk');
      const choice = chunk.choices[0];
      if (choice.delta.content) pieces.push(choice.delta.content);
      if (choice.finish_reason) finish_reason = choice.finish_reason;
    }

    assert.equal(pieces.length, 5);
    pieces.forEach((piece, i) => assert.match(piece, new RegExp(`piece ${i + 1}/5`)));
    assert.equal(finish_reason, 'stop');
    // mock-stream-5x100 emits a chunk every 100 ms: a gateway that buffered the body would
    // deliver all five at once.
    assert.ok(
        arrivals.at(-1) - arrivals[0] >= 200,
        `chunks arrived within ${arrivals.at(-1) - arrivals[0]} ms of each other`);

    const entry = await stack.wait_for_access(request_id);
    assert.equal(entry.model, 'short-stream');
    assert.equal(entry.stream, true);
    assert.equal(entry.outcome, 'ok');
    assert.equal(entry.status, 200);
  });

  test('completion without stream returns text', test_timeout, async () => {
    const completion =
        await client.completions.create({model: 'gpt-test', prompt: 'Say something'});

    assert.equal(completion.object, 'text_completion');
    assert.equal(typeof completion.choices[0].text, 'string');
    assert.ok(completion.choices[0].text.length > 0);
    assert.equal(completion.choices[0].finish_reason, 'stop');
    const entry = await stack.wait_for_access(completion._request_id);
    assert.equal(entry.outcome, 'ok');
    assert.equal(entry.stream, false);
  });

  test('completion with stream yields text chunks and ends', test_timeout, async () => {
    const stream = await client.completions.create(
        {model: 'gpt-test', prompt: 'Say something', stream: true},
        {headers: {'X-Request-Id': 'e2e-completion-stream'}});
    const texts = [];
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'text_completion');
      texts.push(chunk.choices[0].text);
    }

    assert.ok(texts.length >= 1);
    assert.ok(texts.join('').length > 0);
    const entry = await stack.wait_for_access('e2e-completion-stream');
    assert.equal(entry.stream, true);
    assert.equal(entry.outcome, 'ok');
    const upstream = upstream_requests(await stack.mock_stats(), 'e2e-completion-stream');
    assert.equal(upstream.length, 1);
    assert.equal(upstream[0].path, '/v1/completions');
  });

  test('embeddings return one numeric vector per input', test_timeout, async () => {
    // The SDK asks for base64 unless told otherwise, and tether-mock answers floats only.
    const single = await client.embeddings.create(
        {model: 'gpt-test', input: 'hello', encoding_format: 'float'});
    assert.equal(single.object, 'list');
    assert.equal(single.data.length, 1);
    assert.ok(Array.isArray(single.data[0].embedding));
    assert.ok(single.data[0].embedding.length > 0);
    for (const x of single.data[0].embedding) assert.equal(typeof x, 'number');

    const many = await client.embeddings.create(
        {model: 'gpt-test', input: ['a', 'b', 'c'], encoding_format: 'float'});
    assert.deepEqual(many.data.map((d) => d.index), [0, 1, 2]);
    for (const d of many.data) assert.ok(d.embedding.every((x) => Number.isFinite(x)));
    const entry = await stack.wait_for_access(many._request_id);
    assert.equal(entry.outcome, 'ok');
  });

  test('responses.create without stream returns the response and its output text', test_timeout,
       async () => {
         const {data, response, request_id} =
             await client.responses.create({model: 'gpt-test', input: 'Say something'})
                 .withResponse();

         assert.equal(response.status, 200);
         assert.equal(data.object, 'response');
         assert.equal(data.status, 'completed');
         assert.match(data.id, /^resp_/);
         // output_text is the SDK's own reading of the output items.
         assert.match(data.output_text, /mock response/);
         assert.equal(data.usage.total_tokens, data.usage.input_tokens + data.usage.output_tokens);
         assert.equal(response.headers.get('x-tether-outcome'), 'ok');

         const entry = await stack.wait_for_access(request_id);
         assert.equal(entry.path, '/v1/responses');
         assert.equal(entry.model, 'gpt-test');
         assert.equal(entry.outcome, 'ok');
         const upstream = upstream_requests(await stack.mock_stats(), request_id);
         assert.equal(upstream.length, 1);
         assert.equal(upstream[0].path, '/v1/responses');
         assert.equal(upstream[0].model, 'mock');
       });

  test('responses.create with stream yields each event as it arrives', test_timeout, async () => {
    const {data: stream, request_id} =
        await client.responses.create({model: 'short-stream', input: 'count', stream: true})
            .withResponse();
    const types = [];
    const deltas = [];
    const arrivals = [];
    let completed = null;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') {
        deltas.push(event.delta);
        arrivals.push(performance.now());
      }
      if (event.type === 'response.completed') completed = event.response;
    }

    assert.equal(types[0], 'response.created');
    assert.equal(types.at(-1), 'response.completed');
    assert.equal(deltas.length, 5);
    deltas.forEach((piece, i) => assert.match(piece, new RegExp(`piece ${i + 1}/5`)));
    assert.equal(completed.status, 'completed');
    assert.equal(completed.output[0].content[0].text, deltas.join(''));
    // mock-stream-5x100: a delta every 100 ms, so a buffered body would arrive all at once.
    assert.ok(
        arrivals.at(-1) - arrivals[0] >= 200,
        `deltas arrived within ${arrivals.at(-1) - arrivals[0]} ms of each other`);
    const entry = await stack.wait_for_access(request_id);
    assert.equal(entry.path, '/v1/responses');
    assert.equal(entry.stream, true);
    assert.equal(entry.outcome, 'ok');
  });

  test('models list names every configured model', test_timeout, async () => {
    const ids = [];
    for await (const model of client.models.list()) {
      assert.equal(model.object, 'model');
      ids.push(model.id);
    }
    for (const name of ['gpt-test', 'short-stream', 'slow-stream', 'slow', 'rejecting']) {
      assert.ok(ids.includes(name), `${name} missing from ${JSON.stringify(ids)}`);
    }
    // Public names only: the deployments' upstream names stay behind the gateway.
    assert.ok(!ids.some((id) => id.startsWith('mock')), JSON.stringify(ids));
  });

  test('unknown model raises NotFoundError with code unknown_model', test_timeout, async () => {
    const before_stats = await stack.mock_stats();
    const err = await client.chat.completions
                    .create({model: 'no-such-model', messages: [{role: 'user', content: 'hi'}]})
                    .then(() => null, (e) => e);

    assert.ok(err instanceof OpenAI.NotFoundError, `got ${err}`);
    assert.equal(err.status, 404);
    assert.equal(err.code, 'unknown_model');
    assert.ok(err.requestID, 'the error carries the request id header');
    assert.equal(err.error.request_id, err.requestID);
    assert.ok(!err.message.includes('"hi"'), 'the message never echoes the request body');
    const after_stats = await stack.mock_stats();
    assert.equal(after_stats.requests, before_stats.requests, 'nothing reached the upstream');
    const entry = await stack.wait_for_access(err.requestID);
    assert.equal(entry.outcome, 'unknown_model');
    assert.equal(entry.status, 404);
  });

  test(
      'upstream 400 raises BadRequestError with the upstream body, without retry', test_timeout,
      async () => {
        const request_id = 'e2e-rejected';
        const err = await client.chat.completions
                        .create(
                            {model: 'rejecting', messages: [{role: 'user', content: 'hi'}]},
                            {headers: {'X-Request-Id': request_id}})
                        .then(() => null, (e) => e);

        assert.ok(err instanceof OpenAI.BadRequestError, `got ${err}`);
        assert.equal(err.status, 400);
        // Passed through as the upstream wrote it.
        assert.equal(err.code, 'mock_fail_400');
        assert.equal(err.type, 'mock_error');
        assert.equal(err.requestID, request_id);
        assert.equal(upstream_requests(await stack.mock_stats(), request_id).length, 1);
        const entry = await stack.wait_for_access(request_id);
        assert.equal(entry.outcome, 'upstream_rejected');
        assert.equal(entry.status, 400);
      });

  // Runs last: it ends the gateway the tests above shared.
  test('SIGTERM after serving requests exits 0 promptly', test_timeout, async () => {
    const started = performance.now();
    const exit = await stack.gateway.stop();
    const took_ms = performance.now() - started;

    assert.deepEqual(
        exit, {code: 0, signal: null},
        `tether did not exit by itself within the harness's bound (${took_ms.toFixed(0)} ms)\n${
            stack.gateway.describe()}`);
  });
});
