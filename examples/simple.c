/* simple.c — the smallest program on libedgeseek's C API: load a model, render a chat with its
 * template, stream a greedy answer (reasoning to stderr, the answer to stdout).
 *
 *   cc simple.c $(pkg-config --cflags --libs edgeseek) -o simple
 *   ./simple -m MODEL [--tokenizer DIR] [-n TOKENS] [-p "question"] [--ids]
 *
 * --ids also prints the prompt's token ids and the generated ones on stderr ("prompt_ids: ...",
 * "ids: ..."), which the install test compares with `edgeseek generate`.
 */
#include <edgeseek/edgeseek.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int32_t* ids;
  size_t n, cap;
} IdList;

static bool OnToken(void* user, int32_t token) {
  IdList* l = (IdList*)user;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    int32_t* grown = (int32_t*)realloc(l->ids, l->cap * sizeof *grown);
    if (!grown) return false;
    l->ids = grown;
  }
  l->ids[l->n++] = token;
  return true;
}

static bool OnText(void* user, es_text_kind kind, const char* text, size_t len) {
  (void)user;
  fwrite(text, 1, len, kind == ES_TEXT_REASONING ? stderr : stdout);
  fflush(kind == ES_TEXT_REASONING ? stderr : stdout);
  return true;
}

static int Fail(const char* what) {
  fprintf(stderr, "simple: %s: %s\n", what, es_last_error());
  return 1;
}

int main(int argc, char** argv) {
  es_model_params mp = es_model_default_params();
  const char* question = "Hello!";
  int n_predict = 32;
  bool print_ids = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-m") && i + 1 < argc) {
      mp.path = argv[++i];
    } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
      mp.tokenizer = argv[++i];
    } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
      n_predict = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "-p") && i + 1 < argc) {
      question = argv[++i];
    } else if (!strcmp(argv[i], "--ids")) {
      print_ids = true;
    } else {
      fprintf(stderr, "usage: %s -m MODEL [--tokenizer DIR] [-n TOKENS] [-p TEXT] [--ids]\n",
              argv[0]);
      return 2;
    }
  }

  es_model* model = NULL;
  if (es_model_load(&mp, &model) != ES_OK) return Fail("loading the model");

  /* The chat template: ask for the size first, then render. */
  es_chat_message msg = {"user", question};
  size_t len = 0;
  es_status st = es_chat_apply_template(model, &msg, 1, true, NULL, 0, &len);
  if (st != ES_OK && st != ES_ERR_BUFFER_TOO_SMALL) return Fail("chat template");
  char* prompt = (char*)malloc(len + 1);
  if (!prompt || es_chat_apply_template(model, &msg, 1, true, prompt, len + 1, &len) != ES_OK)
    return Fail("chat template");

  if (print_ids) {
    size_t n = 0;
    es_tokenize(model, prompt, len, false, NULL, 0, &n);
    int32_t* ids = (int32_t*)malloc((n ? n : 1) * sizeof *ids);
    if (!ids || es_tokenize(model, prompt, len, false, ids, n, &n) != ES_OK)
      return Fail("tokenize");
    fprintf(stderr, "prompt_ids:");
    for (size_t i = 0; i < n; ++i) fprintf(stderr, "%s%d", i ? "," : " ", ids[i]);
    fprintf(stderr, "\n");
    free(ids);
  }

  IdList generated = {NULL, 0, 0};
  es_generate_params gp = es_generate_default_params(); /* greedy */
  gp.max_tokens = n_predict;
  gp.on_text = OnText;
  gp.on_token = OnToken;
  gp.user = &generated;
  es_generate_result res;
  if (es_generate(model, prompt, &gp, &res) != ES_OK) return Fail("generate");
  printf("\n");
  if (print_ids) {
    fprintf(stderr, "ids:");
    for (size_t i = 0; i < generated.n; ++i) fprintf(stderr, " %d", generated.ids[i]);
    fprintf(stderr, "\nfinish: %d, prompt %d tokens, %d generated\n", (int)res.finish,
            res.prompt_tokens, res.completion_tokens);
  }
  free(generated.ids);
  free(prompt);
  es_model_free(model);
  return 0;
}
