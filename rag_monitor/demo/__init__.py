"""The bundled sample RAG app, its scripted traffic and ``rag-monitor demo`` (see ``run.py``).

Nothing here is imported by the rest of ``rag_monitor``; the demo uses the SDK and the agent
exactly as a user would.
"""
