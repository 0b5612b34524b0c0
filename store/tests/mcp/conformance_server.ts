#!/usr/bin/env node

// Copied for idemkit's tests from the MCP TypeScript SDK's repository
// (modelcontextprotocol/typescript-sdk, tag v1.29.0,
// test/conformance/src/everythingServer.ts; MIT License, Copyright (c) 2024
// Anthropic, PBC). Changed: the imports name the published
// @modelcontextprotocol/sdk, and it listens on $PORT (0: any free port) and
// prints the address it got. Node 22 runs it as it is (type stripping).

/**
 * MCP Conformance Test Server (v1.x)
 *
 * Server implementing all MCP features for conformance testing.
 * Adapted from the main branch version for the v1.x single-package SDK.
 */

import { randomUUID } from 'node:crypto';

import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { EventId, EventStore, StreamId } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult, GetPromptResult, ReadResourceResult } from '@modelcontextprotocol/sdk/types.js';
import {
    CompleteRequestSchema,
    CreateMessageResultSchema,
    ElicitResultSchema,
    isInitializeRequest,
    SetLevelRequestSchema,
    SubscribeRequestSchema,
    UnsubscribeRequestSchema
} from '@modelcontextprotocol/sdk/types.js';
import { localhostHostValidation } from '@modelcontextprotocol/sdk/server/middleware/hostHeaderValidation.js';
import cors from 'cors';
import type { Request, Response } from 'express';
import express from 'express';
import { z } from 'zod';

// Server state
const resourceSubscriptions = new Set<string>();
const watchedResourceContent = 'Watched resource content';

// Session management
const transports: { [sessionId: string]: StreamableHTTPServerTransport } = {};
const servers: { [sessionId: string]: McpServer } = {};

// In-memory event store for SEP-1699 resumability
const eventStoreData = new Map<string, { eventId: string; message: unknown; streamId: string }>();

function createEventStore(): EventStore {
    return {
        async storeEvent(streamId: StreamId, message: unknown): Promise<EventId> {
            const eventId = `${streamId}::${Date.now()}_${randomUUID()}`;
            eventStoreData.set(eventId, { eventId, message, streamId });
            return eventId;
        },
        async replayEventsAfter(
            lastEventId: EventId,
            { send }: { send: (eventId: EventId, message: unknown) => Promise<void> }
        ): Promise<StreamId> {
            const streamId = lastEventId.split('::')[0] || lastEventId;
            const eventsToReplay: Array<[string, { message: unknown }]> = [];
            for (const [eventId, data] of eventStoreData.entries()) {
                if (data.streamId === streamId && eventId > lastEventId) {
                    eventsToReplay.push([eventId, data]);
                }
            }
            eventsToReplay.sort(([a], [b]) => a.localeCompare(b));
            for (const [eventId, { message }] of eventsToReplay) {
                if (message && typeof message === 'object' && Object.keys(message).length > 0) {
                    await send(eventId, message);
                }
            }
            return streamId;
        }
    };
}

// Sample base64 encoded 1x1 red PNG pixel for testing
const TEST_IMAGE_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';

// Sample base64 encoded minimal WAV file for testing
const TEST_AUDIO_BASE64 = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';

// Function to create a new MCP server instance (one per session)
function createMcpServer() {
    const mcpServer = new McpServer(
        {
            name: 'mcp-conformance-test-server',
            version: '1.0.0'
        },
        {
            capabilities: {
                tools: {
                    listChanged: true
                },
                resources: {
                    subscribe: true,
                    listChanged: true
                },
                prompts: {
                    listChanged: true
                },
                logging: {},
                completions: {}
            }
        }
    );

    // Helper to send log messages using the underlying server
    function sendLog(
        level: 'debug' | 'info' | 'notice' | 'warning' | 'error' | 'critical' | 'alert' | 'emergency',
        message: string,
        _data?: unknown
    ) {
        mcpServer.server
            .notification({
                method: 'notifications/message',
                params: {
                    level,
                    logger: 'conformance-test-server',
                    data: _data || message
                }
            })
            .catch(() => {
                // Ignore error if no client is connected
            });
    }

    // ===== TOOLS =====

    // Simple text tool
    mcpServer.tool('test_simple_text', 'Tests simple text content response', async (): Promise<CallToolResult> => {
        return {
            content: [{ type: 'text', text: 'This is a simple text response for testing.' }]
        };
    });

    // Image content tool
    mcpServer.tool('test_image_content', 'Tests image content response', async (): Promise<CallToolResult> => {
        return {
            content: [{ type: 'image', data: TEST_IMAGE_BASE64, mimeType: 'image/png' }]
        };
    });

    // Audio content tool
    mcpServer.tool('test_audio_content', 'Tests audio content response', async (): Promise<CallToolResult> => {
        return {
            content: [{ type: 'audio', data: TEST_AUDIO_BASE64, mimeType: 'audio/wav' }]
        };
    });

    // Embedded resource tool
    mcpServer.tool('test_embedded_resource', 'Tests embedded resource content response', async (): Promise<CallToolResult> => {
        return {
            content: [
                {
                    type: 'resource',
                    resource: {
                        uri: 'test://embedded-resource',
                        mimeType: 'text/plain',
                        text: 'This is an embedded resource content.'
                    }
                }
            ]
        };
    });

    // Multiple content types tool
    mcpServer.tool(
        'test_multiple_content_types',
        'Tests response with multiple content types (text, image, resource)',
        async (): Promise<CallToolResult> => {
            return {
                content: [
                    { type: 'text', text: 'Multiple content types test:' },
                    { type: 'image', data: TEST_IMAGE_BASE64, mimeType: 'image/png' },
                    {
                        type: 'resource',
                        resource: {
                            uri: 'test://mixed-content-resource',
                            mimeType: 'application/json',
                            text: JSON.stringify({ test: 'data', value: 123 })
                        }
                    }
                ]
            };
        }
    );

    // Tool with logging
    mcpServer.tool(
        'test_tool_with_logging',
        'Tests tool that emits log messages during execution',
        {},
        async (_args, extra): Promise<CallToolResult> => {
            await extra.sendNotification({
                method: 'notifications/message',
                params: {
                    level: 'info',
                    data: 'Tool execution started'
                }
            });
            await new Promise(resolve => setTimeout(resolve, 50));

            await extra.sendNotification({
                method: 'notifications/message',
                params: {
                    level: 'info',
                    data: 'Tool processing data'
                }
            });
            await new Promise(resolve => setTimeout(resolve, 50));

            await extra.sendNotification({
                method: 'notifications/message',
                params: {
                    level: 'info',
                    data: 'Tool execution completed'
                }
            });
            return {
                content: [{ type: 'text', text: 'Tool with logging executed successfully' }]
            };
        }
    );

    // Tool with progress
    mcpServer.tool(
        'test_tool_with_progress',
        'Tests tool that reports progress notifications',
        {},
        async (_args, extra): Promise<CallToolResult> => {
            const progressToken = extra._meta?.progressToken ?? 0;
            console.log('Progress token:', progressToken);
            await extra.sendNotification({
                method: 'notifications/progress',
                params: {
                    progressToken,
                    progress: 0,
                    total: 100,
                    message: `Completed step ${0} of ${100}`
                }
            });
            await new Promise(resolve => setTimeout(resolve, 50));

            await extra.sendNotification({
                method: 'notifications/progress',
                params: {
                    progressToken,
                    progress: 50,
                    total: 100,
                    message: `Completed step ${50} of ${100}`
                }
            });
            await new Promise(resolve => setTimeout(resolve, 50));

            await extra.sendNotification({
                method: 'notifications/progress',
                params: {
                    progressToken,
                    progress: 100,
                    total: 100,
                    message: `Completed step ${100} of ${100}`
                }
            });

            return {
                content: [{ type: 'text', text: String(progressToken) }]
            };
        }
    );

    // Error handling tool
    mcpServer.tool('test_error_handling', 'Tests error response handling', async (): Promise<CallToolResult> => {
        throw new Error('This tool intentionally returns an error for testing');
    });

    // SEP-1699: Reconnection test tool - closes SSE stream mid-call to test client reconnection
    mcpServer.tool(
        'test_reconnection',
        'Tests SSE stream disconnection and client reconnection (SEP-1699). Server will close the stream mid-call and send the result after client reconnects.',
        {},
        async (_args, extra): Promise<CallToolResult> => {
            const sleep = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));

            console.log(`[${extra.sessionId}] Starting test_reconnection tool...`);

            // Get the transport for this session
            const transport = extra.sessionId ? transports[extra.sessionId] : undefined;
            if (transport && extra.requestId) {
                // Close the SSE stream to trigger client reconnection
                console.log(`[${extra.sessionId}] Closing SSE stream to trigger client polling...`);
                transport.closeSSEStream(extra.requestId);
            }

            // Wait for client to reconnect (should respect retry field)
            await sleep(100);

            console.log(`[${extra.sessionId}] test_reconnection tool complete`);

            return {
                content: [
                    {
                        type: 'text',
                        text: 'Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure.'
                    }
                ]
            };
        }
    );

    // Sampling tool - requests LLM completion from client
    mcpServer.tool(
        'test_sampling',
        'Tests server-initiated sampling (LLM completion request)',
        {
            prompt: z.string()
        },
        async (args: { prompt: string }, extra): Promise<CallToolResult> => {
            try {
                // Request sampling from client
                const result = (await extra.sendRequest(
                    {
                        method: 'sampling/createMessage',
                        params: {
                            messages: [
                                {
                                    role: 'user',
                                    content: {
                                        type: 'text',
                                        text: args.prompt
                                    }
                                }
                            ],
                            maxTokens: 100
                        }
                    },
                    CreateMessageResultSchema
                )) as { content?: { text?: string }; message?: { content?: { text?: string } } };

                const modelResponse = result.content?.text || result.message?.content?.text || 'No response';

                return {
                    content: [
                        {
                            type: 'text',
                            text: `LLM response: ${modelResponse}`
                        }
                    ]
                };
            } catch (error) {
                return {
                    content: [
                        {
                            type: 'text',
                            text: `Sampling not supported or error: ${error instanceof Error ? error.message : String(error)}`
                        }
                    ]
                };
            }
        }
    );

    // Elicitation tool - requests user input from client
    mcpServer.tool(
        'test_elicitation',
        'Tests server-initiated elicitation (user input request)',
        {
            message: z.string().describe('The message to show the user')
        },
        async (args: { message: string }, extra): Promise<CallToolResult> => {
            try {
                // Request user input from client
                const result = await extra.sendRequest(
                    {
                        method: 'elicitation/create',
                        params: {
                            message: args.message,
                            requestedSchema: {
                                type: 'object',
                                properties: {
                                    response: {
                                        type: 'string',
                                        description: "User's response"
                                    }
                                },
                                required: ['response']
                            }
                        }
                    },
                    ElicitResultSchema
                );

                const elicitResult = result as { action?: string; content?: unknown };
                return {
                    content: [
                        {
                            type: 'text',
                            text: `User response: action=${elicitResult.action}, content=${JSON.stringify(elicitResult.content || {})}`
                        }
                    ]
                };
            } catch (error) {
                return {
                    content: [
                        {
                            type: 'text',
                            text: `Elicitation not supported or error: ${error instanceof Error ? error.message : String(error)}`
                        }
                    ]
                };
            }
        }
    );

    // SEP-1034: Elicitation with default values for all primitive types
    mcpServer.tool(
        'test_elicitation_sep1034_defaults',
        'Tests elicitation with default values per SEP-1034',
        {},
        async (_args, extra): Promise<CallToolResult> => {
            try {
                const result = await extra.sendRequest(
                    {
                        method: 'elicitation/create',
                        params: {
                            message: 'Please review and update the form fields with defaults',
                            requestedSchema: {
                                type: 'object',
                                properties: {
                                    name: {
                                        type: 'string',
                                        description: 'User name',
                                        default: 'John Doe'
                                    },
                                    age: {
                                        type: 'integer',
                                        description: 'User age',
                                        default: 30
                                    },
                                    score: {
                                        type: 'number',
                                        description: 'User score',
                                        default: 95.5
                                    },
                                    status: {
                                        type: 'string',
                                        description: 'User status',
                                        enum: ['active', 'inactive', 'pending'],
                                        default: 'active'
                                    },
                                    verified: {
                                        type: 'boolean',
                                        description: 'Verification status',
                                        default: true
                                    }
                                },
                                required: []
                            }
                        }
                    },
                    ElicitResultSchema
                );

                const elicitResult = result as { action?: string; content?: unknown };
                return {
                    content: [
                        {
                            type: 'text',
                            text: `Elicitation completed: action=${elicitResult.action}, content=${JSON.stringify(elicitResult.content || {})}`
                        }
                    ]
                };
            } catch (error) {
                return {
                    content: [
                        {
                            type: 'text',
                            text: `Elicitation not supported or error: ${error instanceof Error ? error.message : String(error)}`
                        }
                    ]
                };
            }
        }
    );

    // SEP-1330: Elicitation with enum schema improvements
    mcpServer.tool(
        'test_elicitation_sep1330_enums',
        'Tests elicitation with enum schema improvements per SEP-1330',
        {},
        async (_args, extra): Promise<CallToolResult> => {
            try {
                const result = await extra.sendRequest(
                    {
                        method: 'elicitation/create',
                        params: {
                            message: 'Please select options from the enum fields',
                            requestedSchema: {
                                type: 'object',
                                properties: {
                                    untitledSingle: {
                                        type: 'string',
                                        description: 'Select one option',
                                        enum: ['option1', 'option2', 'option3']
                                    },
                                    titledSingle: {
                                        type: 'string',
                                        description: 'Select one option with titles',
                                        oneOf: [
                                            { const: 'value1', title: 'First Option' },
                                            { const: 'value2', title: 'Second Option' },
                                            { const: 'value3', title: 'Third Option' }
                                        ]
                                    },
                                    legacyEnum: {
                                        type: 'string',
                                        description: 'Select one option (legacy)',
                                        enum: ['opt1', 'opt2', 'opt3'],
                                        enumNames: ['Option One', 'Option Two', 'Option Three']
                                    },
                                    untitledMulti: {
                                        type: 'array',
                                        description: 'Select multiple options',
                                        minItems: 1,
                                        maxItems: 3,
                                        items: {
                                            type: 'string',
                                            enum: ['option1', 'option2', 'option3']
                                        }
                                    },
                                    titledMulti: {
                                        type: 'array',
                                        description: 'Select multiple options with titles',
                                        minItems: 1,
                                        maxItems: 3,
                                        items: {
                                            anyOf: [
                                                { const: 'value1', title: 'First Choice' },
                                                { const: 'value2', title: 'Second Choice' },
                                                { const: 'value3', title: 'Third Choice' }
                                            ]
                                        }
                                    }
                                },
                                required: []
                            }
                        }
                    },
                    ElicitResultSchema
                );

                const elicitResult = result as { action?: string; content?: unknown };
                return {
                    content: [
                        {
                            type: 'text',
                            text: `Elicitation completed: action=${elicitResult.action}, content=${JSON.stringify(elicitResult.content || {})}`
                        }
                    ]
                };
            } catch (error) {
                return {
                    content: [
                        {
                            type: 'text',
                            text: `Elicitation not supported or error: ${error instanceof Error ? error.message : String(error)}`
                        }
                    ]
                };
            }
        }
    );

    // SEP-1613: JSON Schema 2020-12 conformance test tool
    const addressSchema = z.object({
        street: z.string().optional(),
        city: z.string().optional()
    });
    mcpServer.tool(
        'json_schema_2020_12_tool',
        'Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)',
        {
            name: z.string().optional(),
            address: addressSchema.optional()
        },
        async (args: { name?: string; address?: { street?: string; city?: string } }): Promise<CallToolResult> => {
            return {
                content: [
                    {
                        type: 'text',
                        text: `JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`
                    }
                ]
            };
        }
    );

    // ===== RESOURCES =====

    // Static text resource
    mcpServer.registerResource(
        'static-text',
        'test://static-text',
        {
            title: 'Static Text Resource',
            description: 'A static text resource for testing',
            mimeType: 'text/plain'
        },
        async (): Promise<ReadResourceResult> => {
            return {
                contents: [
                    {
                        uri: 'test://static-text',
                        mimeType: 'text/plain',
                        text: 'This is the content of the static text resource.'
                    }
                ]
            };
        }
    );

    // Static binary resource
    mcpServer.registerResource(
        'static-binary',
        'test://static-binary',
        {
            title: 'Static Binary Resource',
            description: 'A static binary resource (image) for testing',
            mimeType: 'image/png'
        },
        async (): Promise<ReadResourceResult> => {
            return {
                contents: [
                    {
                        uri: 'test://static-binary',
                        mimeType: 'image/png',
                        blob: TEST_IMAGE_BASE64
                    }
                ]
            };
        }
    );

    // Resource template
    mcpServer.registerResource(
        'template',
        new ResourceTemplate('test://template/{id}/data', { list: undefined }),
        {
            title: 'Resource Template',
            description: 'A resource template with parameter substitution',
            mimeType: 'application/json'
        },
        async (uri, variables): Promise<ReadResourceResult> => {
            const id = variables.id;
            return {
                contents: [
                    {
                        uri: uri.toString(),
                        mimeType: 'application/json',
                        text: JSON.stringify({
                            id,
                            templateTest: true,
                            data: `Data for ID: ${id}`
                        })
                    }
                ]
            };
        }
    );

    // Watched resource
    mcpServer.registerResource(
        'watched-resource',
        'test://watched-resource',
        {
            title: 'Watched Resource',
            description: 'A resource that auto-updates every 3 seconds',
            mimeType: 'text/plain'
        },
        async (): Promise<ReadResourceResult> => {
            return {
                contents: [
                    {
                        uri: 'test://watched-resource',
                        mimeType: 'text/plain',
                        text: watchedResourceContent
                    }
                ]
            };
        }
    );

    // Subscribe/Unsubscribe handlers
    mcpServer.server.setRequestHandler(SubscribeRequestSchema, async request => {
        const uri = request.params.uri;
        resourceSubscriptions.add(uri);
        sendLog('info', `Subscribed to resource: ${uri}`);
        return {};
    });

    mcpServer.server.setRequestHandler(UnsubscribeRequestSchema, async request => {
        const uri = request.params.uri;
        resourceSubscriptions.delete(uri);
        sendLog('info', `Unsubscribed from resource: ${uri}`);
        return {};
    });

    // ===== PROMPTS =====

    // Simple prompt
    mcpServer.prompt('test_simple_prompt', 'A simple prompt without arguments', async (): Promise<GetPromptResult> => {
        return {
            messages: [
                {
                    role: 'user',
                    content: {
                        type: 'text',
                        text: 'This is a simple prompt for testing.'
                    }
                }
            ]
        };
    });

    // Prompt with arguments
    mcpServer.prompt(
        'test_prompt_with_arguments',
        'A prompt with required arguments',
        {
            arg1: z.string().describe('First test argument'),
            arg2: z.string().describe('Second test argument')
        },
        async (args: { arg1: string; arg2: string }): Promise<GetPromptResult> => {
            return {
                messages: [
                    {
                        role: 'user',
                        content: {
                            type: 'text',
                            text: `Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'`
                        }
                    }
                ]
            };
        }
    );

    // Prompt with embedded resource
    mcpServer.prompt(
        'test_prompt_with_embedded_resource',
        'A prompt that includes an embedded resource',
        {
            resourceUri: z.string().describe('URI of the resource to embed')
        },
        async (args: { resourceUri: string }): Promise<GetPromptResult> => {
            return {
                messages: [
                    {
                        role: 'user',
                        content: {
                            type: 'resource',
                            resource: {
                                uri: args.resourceUri,
                                mimeType: 'text/plain',
                                text: 'Embedded resource content for testing.'
                            }
                        }
                    },
                    {
                        role: 'user',
                        content: {
                            type: 'text',
                            text: 'Please process the embedded resource above.'
                        }
                    }
                ]
            };
        }
    );

    // Prompt with image
    mcpServer.prompt('test_prompt_with_image', 'A prompt that includes image content', async (): Promise<GetPromptResult> => {
        return {
            messages: [
                {
                    role: 'user',
                    content: {
                        type: 'image',
                        data: TEST_IMAGE_BASE64,
                        mimeType: 'image/png'
                    }
                },
                {
                    role: 'user',
                    content: { type: 'text', text: 'Please analyze the image above.' }
                }
            ]
        };
    });

    // ===== LOGGING =====

    mcpServer.server.setRequestHandler(SetLevelRequestSchema, async request => {
        const level = request.params.level;
        sendLog('info', `Log level set to: ${level}`);
        return {};
    });

    // ===== COMPLETION =====

    mcpServer.server.setRequestHandler(CompleteRequestSchema, async () => {
        return {
            completion: {
                values: [],
                total: 0,
                hasMore: false
            }
        };
    });

    return mcpServer;
}

// ===== EXPRESS APP =====

const app = express();
app.use(express.json());
app.use(localhostHostValidation());

// Configure CORS to expose Mcp-Session-Id header for browser-based clients
app.use(
    cors({
        origin: '*',
        exposedHeaders: ['Mcp-Session-Id'],
        allowedHeaders: ['Content-Type', 'mcp-session-id', 'last-event-id']
    })
);

// Handle POST requests - stateful mode
app.post('/mcp', async (req: Request, res: Response) => {
    const sessionId = req.headers['mcp-session-id'] as string | undefined;

    try {
        let transport: StreamableHTTPServerTransport;

        if (sessionId && transports[sessionId]) {
            transport = transports[sessionId];
        } else if (!sessionId && isInitializeRequest(req.body)) {
            const mcpServer = createMcpServer();

            transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
                eventStore: createEventStore(),
                retryInterval: 5000,
                onsessioninitialized: (newSessionId: string) => {
                    transports[newSessionId] = transport;
                    servers[newSessionId] = mcpServer;
                    console.log(`Session initialized with ID: ${newSessionId}`);
                }
            });

            transport.onclose = () => {
                const sid = transport.sessionId;
                if (sid && transports[sid]) {
                    delete transports[sid];
                    if (servers[sid]) {
                        servers[sid].close();
                        delete servers[sid];
                    }
                    console.log(`Session ${sid} closed`);
                }
            };

            await mcpServer.connect(transport);
            await transport.handleRequest(req, res, req.body);
            return;
        } else {
            res.status(400).json({
                jsonrpc: '2.0',
                error: {
                    code: -32_000,
                    message: 'Invalid or missing session ID'
                },
                id: null
            });
            return;
        }

        await transport.handleRequest(req, res, req.body);
    } catch (error) {
        console.error('Error handling MCP request:', error);
        if (!res.headersSent) {
            res.status(500).json({
                jsonrpc: '2.0',
                error: {
                    code: -32_603,
                    message: 'Internal server error'
                },
                id: null
            });
        }
    }
});

// Handle GET requests - SSE streams for sessions
app.get('/mcp', async (req: Request, res: Response) => {
    const sessionId = req.headers['mcp-session-id'] as string | undefined;

    if (!sessionId || !transports[sessionId]) {
        res.status(400).send('Invalid or missing session ID');
        return;
    }

    const lastEventId = req.headers['last-event-id'] as string | undefined;
    if (lastEventId) {
        console.log(`Client reconnecting with Last-Event-ID: ${lastEventId}`);
    } else {
        console.log(`Establishing SSE stream for session ${sessionId}`);
    }

    try {
        const transport = transports[sessionId];
        await transport.handleRequest(req, res);
    } catch (error) {
        console.error('Error handling SSE stream:', error);
        if (!res.headersSent) {
            res.status(500).send('Error establishing SSE stream');
        }
    }
});

// Handle DELETE requests - session termination
app.delete('/mcp', async (req: Request, res: Response) => {
    const sessionId = req.headers['mcp-session-id'] as string | undefined;

    if (!sessionId || !transports[sessionId]) {
        res.status(400).send('Invalid or missing session ID');
        return;
    }

    console.log(`Received session termination request for session ${sessionId}`);

    try {
        const transport = transports[sessionId];
        await transport.handleRequest(req, res);
    } catch (error) {
        console.error('Error handling termination:', error);
        if (!res.headersSent) {
            res.status(500).send('Error processing session termination');
        }
    }
});

// Start server
const PORT = process.env.PORT || 3000;
const listener = app.listen(Number(PORT), '127.0.0.1', () => {
    const port = (listener.address() as { port: number }).port;
    console.log(`MCP Conformance Test Server running on http://localhost:${port}/mcp`);
});
