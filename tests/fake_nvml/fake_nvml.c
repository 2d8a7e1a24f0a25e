/* A fake NVML for tests on machines without a GPU: the entry points the
 * agent loads (src/agent/nvml.h), answering from a state file that a test
 * rewrites to inject a fault. The agent under test loads it exactly as it
 * loads libnvidia-ml.so.1 (BULWARK_NVML_LIB), so everything after the
 * library call is the real path.
 *
 * The file: $BULWARK_FAKE_NVML_STATE, where "{machine}" stands for the
 * process's `--machine` argument, so one environment serves every agent of
 * a local cluster. It is re-read on every call; a missing file is one
 * healthy GPU. One directive a line ('#' starts a comment):
 *   init CODE              nvmlInit_v2 answers CODE (9: driver not loaded)
 *   gpus N                 the device count (default 1)
 *   ecc GPU COUNT          volatile uncorrectable ECC errors
 *   ecc-off GPU            ECC queries answer NOT_SUPPORTED
 *   remap GPU CORR UNC PENDING FAILED
 *   throttle GPU BITS      clock throttle reasons (0x40: hardware thermal)
 *   lost GPU               every query of GPU answers GPU_IS_LOST
 *   events CODE            nvmlEventSetCreate answers CODE (3: not supported)
 *   xid GPU XID            an Xid critical error; each line written after
 *                          nvmlEventSetCreate is delivered once, in order,
 *                          by nvmlEventSetWait_v2 (as NVML delivers only
 *                          events after registration)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GPUS 8
#define MAX_XIDS 64

enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, TIMEOUT = 10, GPU_IS_LOST = 15 };

typedef struct {
  int init, events, gpus, nxid;
  unsigned long long ecc[MAX_GPUS], throttle[MAX_GPUS];
  int ecc_off[MAX_GPUS], lost[MAX_GPUS];
  unsigned remap[MAX_GPUS][4];
  unsigned xid_gpu[MAX_XIDS];
  unsigned long long xid[MAX_XIDS];
} State;

typedef struct {
  void* device;
  unsigned long long event_type, event_data;
  unsigned gpu_instance_id, compute_instance_id;
} EventData;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int delivered; /* xid lines already delivered */
static int event_set; /* the one event set's storage; its address is the handle */

/* The --machine argument of this process, from /proc/self/cmdline. */
static void Machine(char* out, size_t n) {
  out[0] = '\0';
  FILE* f = fopen("/proc/self/cmdline", "r");
  if (!f) return;
  char buf[4096];
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[len] = '\0';
  for (size_t i = 0; i < len;) {
    const char* arg = buf + i;
    i += strlen(arg) + 1;
    if (strcmp(arg, "--machine") == 0 && i < len) {
      snprintf(out, n, "%s", buf + i);
      return;
    }
  }
}

static void Load(State* s) {
  memset(s, 0, sizeof *s);
  s->gpus = 1;
  const char* tmpl = getenv("BULWARK_FAKE_NVML_STATE");
  if (!tmpl) return;
  char path[4096], machine[256];
  const char* at = strstr(tmpl, "{machine}");
  if (at) {
    Machine(machine, sizeof machine);
    snprintf(path, sizeof path, "%.*s%s%s", (int)(at - tmpl), tmpl, machine, at + strlen("{machine}"));
  } else {
    snprintf(path, sizeof path, "%s", tmpl);
  }
  FILE* f = fopen(path, "r");
  if (!f) return;
  char line[512], word[32];
  while (fgets(line, sizeof line, f)) {
    unsigned g = 0;
    unsigned long long a = 0;
    unsigned r[4];
    if (sscanf(line, "%31s", word) != 1 || word[0] == '#') continue;
    if (strcmp(word, "init") == 0) sscanf(line, "%*s %d", &s->init);
    else if (strcmp(word, "events") == 0) sscanf(line, "%*s %d", &s->events);
    else if (strcmp(word, "gpus") == 0) sscanf(line, "%*s %d", &s->gpus);
    else if (sscanf(line, "%*s %u", &g) != 1 || g >= MAX_GPUS) continue;
    else if (strcmp(word, "ecc") == 0 && sscanf(line, "%*s %*u %llu", &a) == 1) s->ecc[g] = a;
    else if (strcmp(word, "ecc-off") == 0) s->ecc_off[g] = 1;
    else if (strcmp(word, "throttle") == 0 && sscanf(line, "%*s %*u %lli", (long long*)&a) == 1) s->throttle[g] = a;
    else if (strcmp(word, "lost") == 0) s->lost[g] = 1;
    else if (strcmp(word, "remap") == 0 && sscanf(line, "%*s %*u %u %u %u %u", &r[0], &r[1], &r[2], &r[3]) == 4)
      memcpy(s->remap[g], r, sizeof r);
    else if (strcmp(word, "xid") == 0 && s->nxid < MAX_XIDS && sscanf(line, "%*s %*u %llu", &a) == 1) {
      s->xid_gpu[s->nxid] = g;
      s->xid[s->nxid++] = a;
    }
  }
  fclose(f);
  if (s->gpus > MAX_GPUS) s->gpus = MAX_GPUS;
}

/* A device handle is its index + 1 (never null). */
static int Index(const State* s, void* device) {
  intptr_t i = (intptr_t)device - 1;
  return i >= 0 && i < s->gpus ? (int)i : -1;
}

int nvmlInit_v2(void) { State s; Load(&s); return s.init; }
int nvmlShutdown(void) { return OK; }

const char* nvmlErrorString(int code) {
  switch (code) {
    case OK: return "Success";
    case NOT_SUPPORTED: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case TIMEOUT: return "Timeout";
    case GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
  }
}

int nvmlDeviceGetCount_v2(unsigned* count) { State s; Load(&s); *count = (unsigned)s.gpus; return OK; }

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  State s;
  Load(&s);
  if ((int)index >= s.gpus) return INVALID_ARGUMENT;
  if (s.lost[index]) return GPU_IS_LOST;
  *device = (void*)(intptr_t)(index + 1);
  return OK;
}

int nvmlDeviceGetTotalEccErrors(void* device, int error_type, int counter_type, unsigned long long* count) {
  State s;
  Load(&s);
  int i = Index(&s, device);
  if (i < 0 || error_type != 1 || counter_type != 0) return INVALID_ARGUMENT;
  if (s.lost[i]) return GPU_IS_LOST;
  if (s.ecc_off[i]) return NOT_SUPPORTED;
  *count = s.ecc[i];
  return OK;
}

int nvmlDeviceGetRemappedRows(void* device, unsigned* corr, unsigned* unc, unsigned* pending, unsigned* failed) {
  State s;
  Load(&s);
  int i = Index(&s, device);
  if (i < 0) return INVALID_ARGUMENT;
  if (s.lost[i]) return GPU_IS_LOST;
  *corr = s.remap[i][0];
  *unc = s.remap[i][1];
  *pending = s.remap[i][2];
  *failed = s.remap[i][3];
  return OK;
}

int nvmlDeviceGetCurrentClocksThrottleReasons(void* device, unsigned long long* reasons) {
  State s;
  Load(&s);
  int i = Index(&s, device);
  if (i < 0) return INVALID_ARGUMENT;
  if (s.lost[i]) return GPU_IS_LOST;
  *reasons = s.throttle[i];
  return OK;
}

int nvmlEventSetCreate(void** set) {
  State s;
  Load(&s);
  if (s.events != OK) return s.events;
  pthread_mutex_lock(&mu);
  delivered = s.nxid;
  pthread_mutex_unlock(&mu);
  *set = &event_set;
  return OK;
}

int nvmlDeviceRegisterEvents(void* device, unsigned long long types, void* set) {
  State s;
  Load(&s);
  return Index(&s, device) >= 0 && set == &event_set && types != 0 ? OK : INVALID_ARGUMENT;
}

/* Blocks like the real call: polls the file every 10 ms until an
 * undelivered xid line appears or the timeout passes. */
int nvmlEventSetWait_v2(void* set, EventData* data, unsigned timeout_ms) {
  if (set != &event_set) return INVALID_ARGUMENT;
  for (unsigned waited = 0;; waited += 10) {
    State s;
    Load(&s);
    pthread_mutex_lock(&mu);
    if (delivered < s.nxid) {
      const int k = delivered++;
      pthread_mutex_unlock(&mu);
      memset(data, 0, sizeof *data);
      data->device = (void*)(intptr_t)(s.xid_gpu[k] + 1);
      data->event_type = 0x8; /* nvmlEventTypeXidCriticalError */
      data->event_data = s.xid[k];
      return OK;
    }
    pthread_mutex_unlock(&mu);
    if (waited >= timeout_ms) return TIMEOUT;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

int nvmlEventSetFree(void* set) { return set == &event_set ? OK : INVALID_ARGUMENT; }
