package telemetry

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ncclprof test collector"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return certFile, keyFile
}

// TestE2ETLS: OTLP over TLS configured only by the standard variables (an https:// endpoint and
// OTEL_EXPORTER_OTLP_CERTIFICATE), over gRPC and HTTP, delivers the exact totals; without the
// certificate the export is refused, one warning says so, and the job goes on.
func TestE2ETLS(t *testing.T) {
	cert, key := selfSigned(t)
	col := startCollectorTLS(t, cert, key)
	for _, proto := range []string{"grpc", "http/protobuf"} {
		port := col.httpPort
		if proto == "grpc" {
			port = col.grpcPort
		}
		endpoint := fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=https://127.0.0.1:%d", port)
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			env := append(otlpEnv(proto, port), endpoint, "OTEL_EXPORTER_OTLP_CERTIFICATE="+cert)
			r := runHost(t, env, "--iters", "100", "p2p")
			checkTruth(t, waitCollected(t, col, r), r, checks{})
			if w := metricsWarnings(r.stderr); len(w) != 0 {
				t.Errorf("warnings over TLS:\n%s", strings.Join(w, "\n"))
			}
		})
		t.Run(strings.ReplaceAll(proto, "/", "_")+"_untrusted", func(t *testing.T) {
			r := runHost(t, append(otlpEnv(proto, port), endpoint), "--iters", "20", "p2p")
			w := metricsWarnings(r.stderr)
			if len(w) != 1 || !strings.Contains(w[0], "certificate") {
				t.Errorf("want one warning about the certificate, got %d:\n%s", len(w), strings.Join(w, "\n"))
			}
			summary(t, r.dir) // the job's other outputs are unaffected
		})
	}
}
