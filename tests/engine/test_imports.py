import subprocess
import sys

MODULES = (
    "checkpoints config counters drafters engines generator gguf_file kv_cache messages "
    "rejection sampling transformer"
).split()


def test_engine_and_text_import_neither_django_nor_celery():
    code = "; ".join(f"import inference.engine.{m}" for m in MODULES)
    code += "; import inference.text.tokenizer; import inference.text.chat_prompts"
    code += (
        "; import sys; bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'celery')]"
        "; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": "."}, cwd=".")
